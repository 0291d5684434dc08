"""Where a model's bytes come from: a bundled registry package or a user's model_dir."""

from __future__ import annotations

from dataclasses import dataclass, field
import logging
import pathlib

from robotmem_ros.embedding import model_files
from robotmem_ros.embedding.registry import BUNDLED, BundledModel
from robotmem_ros.errors import EmbeddingError

logger = logging.getLogger('robotmem.embedding')


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
    path = model_files.locate(spec.model)
    tokenizer = None
    if spec.tokenizer is not None:
        tokenizer = model_files.read_verified(spec.tokenizer).decode('utf-8')
    return ModelSource(spec.name, model_files.read_verified(spec.model, path), spec.model.sha256,
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
        tokenizer = model_files.read_bytes(tokenizer_path, 'tokenizer').decode('utf-8', 'replace')
    model_bytes = model_files.read_bytes(model_path, 'model')
    return ModelSource(f'dir:{root.resolve().name}', model_bytes,
                       model_files.sha256_hex(model_bytes), str(model_path), tokenizer, 0)
