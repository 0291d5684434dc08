"""ament_pep257 (the ament docstring convention) over the package."""

import pathlib

from ament_pep257.main import main
import pytest

PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.linter
@pytest.mark.pep257
def test_pep257(monkeypatch):
    monkeypatch.chdir(PACKAGE_DIR)
    rc = main(argv=['.', 'test'])
    assert rc == 0, 'Found code style errors / warnings'
