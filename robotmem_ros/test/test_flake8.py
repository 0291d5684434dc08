"""ament_flake8 over the package, configured by setup.cfg [flake8] (max line 99)."""

import pathlib

from ament_flake8.main import main_with_errors
import pytest

PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.flake8
@pytest.mark.linter
def test_flake8(monkeypatch):
    monkeypatch.chdir(PACKAGE_DIR)
    rc, errors = main_with_errors(argv=['--config', 'setup.cfg', '.'])
    assert rc == 0, f'Found {len(errors)} code style errors / warnings:\n' + '\n'.join(errors)
