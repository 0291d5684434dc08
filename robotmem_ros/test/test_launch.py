"""
Launch file, params.yaml and entry point agree with the parameter table.

Where launch_ros is installed (``make build`` with ../shared/ros2-tools, as in CI) the launch
description is generated for real and its arguments read from it; test_ros2_cli.py also runs
it with ``ros2 launch``. Without launch_ros (a fresh clone) the file is read with ``ast``.
"""

import ast
import dataclasses
import importlib.util
import os
import pathlib

import pytest
from robotmem_ros.config import MemoryConfig, OWNERS
from robotmem_ros.node.params_file import node_parameters, render_params_yaml

PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1]
LAUNCH_FILE = PACKAGE_DIR / 'launch' / 'robotmem.launch.py'
PARAMS_FILE = PACKAGE_DIR / 'config' / 'params.yaml'
DEFAULTS = {name: value for name, _, value in MemoryConfig().items()}


def launch_tree():
    return ast.parse(LAUNCH_FILE.read_text(), str(LAUNCH_FILE))


def launch_description():
    """Return the description the source launch file generates (launch_ros needed)."""
    spec = importlib.util.spec_from_file_location('robotmem_launch', LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generate_launch_description()


def launch_arguments():
    """Map each DeclareLaunchArgument name to its default_value."""
    if importlib.util.find_spec('launch_ros') is not None:
        from launch import LaunchContext
        context = LaunchContext()
        return {a.name: ''.join(s.perform(context) for s in a.default_value)
                for a in launch_description().get_launch_arguments()}
    found = {}
    for call in ast.walk(launch_tree()):
        if isinstance(call, ast.Call) and getattr(call.func, 'id', '') == 'DeclareLaunchArgument':
            default = next(k.value for k in call.keywords if k.arg == 'default_value')
            found[call.args[0].value] = (default.value if isinstance(default, ast.Constant)
                                         else None)
    return found


def parameter_arguments():
    for node in launch_tree().body:
        if isinstance(node, ast.Assign) and node.targets[0].id == 'PARAMETER_ARGUMENTS':
            return ast.literal_eval(node.value)
    raise AssertionError('PARAMETER_ARGUMENTS not found')


def test_launch_arguments_are_the_documented_set():
    assert set(launch_arguments()) == {'namespace', 'params_file', 'db_path', 'collection',
                                       'embed_device', 'respawn'}


def test_parameter_arguments_map_to_parameters_and_defer_by_default():
    args = launch_arguments()
    for name in parameter_arguments():
        assert name in DEFAULTS, name
        assert args[name] in ('', DEFAULTS[name]), name  # '' = keep params_file's value
    assert set(args) - set(parameter_arguments()) == {'namespace', 'params_file', 'respawn'}
    assert args['respawn'] == 'false'


def test_params_yaml_lists_every_parameter_with_its_default():
    params = node_parameters(str(PARAMS_FILE))
    assert params == DEFAULTS
    for name, value in params.items():
        assert type(value) is type(DEFAULTS[name]), name  # 1 vs 1.0 matters to rclpy
    MemoryConfig.from_mapping(params)


def test_params_yaml_is_written_from_the_table():
    """Names, defaults, descriptions, read-only marks and grouping: all from config.py."""
    assert PARAMS_FILE.read_text() == render_params_yaml(), (
        'config/params.yaml is stale: python -m robotmem_ros.node.params_file > '
        'robotmem_ros/config/params.yaml')


def test_every_parameter_descriptor_carries_its_spec():
    from robotmem_ros.node.parameters import descriptor
    for name, spec, default in MemoryConfig().items():
        described = descriptor(name, spec, default)
        assert (described.name, described.description, described.read_only) == (
            name, spec.description, spec.read_only)


def test_settings_are_declared_grouped_by_owner():
    owners = [spec.owner for _, spec, _ in MemoryConfig().items()]
    assert set(owners) == set(OWNERS)
    groups = [o for i, o in enumerate(owners) if i == 0 or owners[i - 1] != o]
    assert groups == list(OWNERS)  # each owner's settings form one block, in OWNERS order
    assert set(MemoryConfig().owned_by('node')) == {
        'perception_qos', 'perception_depth', 'service_queue_depth', 'perception_batch_size',
        'perception_flush_interval', 'perception_max_buffer', 'status_period',
        'resend_window_s', 'resend_window_max'}


def test_params_file_section_applies_under_namespaces(tmp_path):
    path = tmp_path / 'p.yaml'
    path.write_text('/**:\n  ros__parameters: {collection: shared, rrf_k: 10}\n'
                    '/ur5e/robotmem:\n  ros__parameters: {collection: arm}\n'
                    'other_node:\n  ros__parameters: {rrf_k: 99}\n')
    assert node_parameters(str(path), '/ur5e/robotmem') == {'collection': 'arm', 'rrf_k': 10}
    assert node_parameters(str(path), '/robotmem') == {'collection': 'shared', 'rrf_k': 10}


def test_console_script_points_at_node_main():
    tree = ast.parse((PACKAGE_DIR / 'setup.py').read_text())
    scripts = next(ast.literal_eval(k.value)['console_scripts'] for k in ast.walk(tree)
                   if isinstance(k, ast.keyword) and k.arg == 'entry_points')
    assert 'robotmem_node = robotmem_ros.node.memory_node:main' in scripts
    from robotmem_ros.node.memory_node import main
    assert callable(main)


def test_installed_share_has_launch_and_config():
    install = pathlib.Path(os.environ.get('ROBOTMEM_INSTALL', PACKAGE_DIR.parent / 'install'))
    share = install / 'robotmem_ros' / 'share' / 'robotmem_ros'
    if not share.is_dir():
        pytest.skip('package not built (make build)')
    assert (share / 'launch' / LAUNCH_FILE.name).read_text() == LAUNCH_FILE.read_text()
    assert (share / 'config' / 'params.yaml').read_text() == PARAMS_FILE.read_text()


def test_launch_file_declares_what_the_ast_reading_finds():
    """The ast fallback and the real description agree (so the fallback stays honest)."""
    pytest.importorskip('launch_ros', reason='launch_ros not installed (../shared/ros2-tools)')
    declared = {a.name for a in launch_description().get_launch_arguments()}
    found = set()
    for call in ast.walk(launch_tree()):
        if isinstance(call, ast.Call) and getattr(call.func, 'id', '') == 'DeclareLaunchArgument':
            found.add(call.args[0].value)
    assert declared == found


def test_config_fields_have_specs():
    for f in dataclasses.fields(MemoryConfig):
        assert f.metadata['spec'].description, f.name
