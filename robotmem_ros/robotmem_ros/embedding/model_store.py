"""
Where models built at setup time live, so the loader finds them without network.

Inside a virtual environment (``make build``) that is ``<venv>/share/robotmem_ros/models``: the
model goes away with the venv it was built for. Outside one (a robot's system Python after
``pip install -r requirements/runtime.txt``) it is the user's data directory,
``$XDG_DATA_HOME/robotmem_ros/models`` (default ``~/.local/share/...``), because the system
prefix is not ours to write. ``ROBOTMEM_MODELS_DIR`` replaces the search path with one directory
(a service running as another user, a read-only image, tests).
"""

from __future__ import annotations

import os
import pathlib
import sys

from robotmem_ros.errors import EmbeddingError

ENV_VAR = 'ROBOTMEM_MODELS_DIR'
BUILD_COMMAND = 'python -m robotmem_ros.embedding.quantize'


def search_dirs() -> list[pathlib.Path]:
    """Directories searched for built models, the one builds go to first."""
    override = os.environ.get(ENV_VAR)
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


def find(relative: str) -> pathlib.Path:
    """Path of a built model file, or EmbeddingError saying how to build it."""
    dirs = search_dirs()
    for root in dirs:
        path = root / relative
        if path.is_file():
            return path
    raise EmbeddingError(f'{relative} has not been built (looked in '
                         f'{", ".join(map(str, dirs))}); run {BUILD_COMMAND}')
