"""
Find bundled model files on disk and read them only if their SHA-256 matches.

Files are located through the installed distributions' metadata, never by importing the
packages, and nothing is ever fetched from the network.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import pathlib
import zipfile

from robotmem_ros.embedding import model_store
from robotmem_ros.embedding.registry import BUILT, FileRef
from robotmem_ros.errors import EmbeddingError


def locate(ref: FileRef) -> pathlib.Path:
    """Return the on-disk path of ``ref`` in its installed distribution (or the models dir)."""
    if ref.dist == BUILT:
        return model_store.find(ref.path)
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
