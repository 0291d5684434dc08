"""
Launch the robotmem memory node.

  ros2 launch robotmem_ros robotmem.launch.py
  ros2 launch robotmem_ros robotmem.launch.py namespace:=ur5e db_path:=/data/mem.db \
      embed_device:=cuda respawn:=true

Empty db_path / collection / embed_device keep the value of params_file (whose defaults are
the node's). The params file is read here and passed as values: the sections that match the
node's fully qualified name apply (``/ur5e/robotmem:``, ``/**:``, ``/**/robotmem:``), and a
plain ``robotmem:`` section applies under any namespace.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from robotmem_ros.node.params_file import node_fqn, node_parameters

# Launch arguments that override the parameter of the same name when not empty.
PARAMETER_ARGUMENTS = ('db_path', 'collection', 'embed_device')


def _memory_node(context, *args, **kwargs):
    def arg(name):
        return LaunchConfiguration(name).perform(context)

    params = node_parameters(arg('params_file'), node_fqn(arg('namespace'), 'robotmem'))
    params.update({name: arg(name) for name in PARAMETER_ARGUMENTS if arg(name)})
    respawn = arg('respawn').lower() in ('true', '1', 'yes')
    return [Node(package='robotmem_ros', executable='robotmem_node', name='robotmem',
                 namespace=arg('namespace'), parameters=[params], output='screen',
                 emulate_tty=True, respawn=respawn, respawn_delay=2.0)]


def generate_launch_description():
    default_params = os.path.join(get_package_share_directory('robotmem_ros'), 'config',
                                  'params.yaml')
    return LaunchDescription([
        DeclareLaunchArgument('namespace', default_value='',
                              description='Namespace of the node (services under '
                                          '/<namespace>/robotmem/...).'),
        DeclareLaunchArgument('params_file', default_value=default_params,
                              description='ROS 2 parameter file; the sections matching '
                                          'the node (/<namespace>/robotmem:, /**:, '
                                          'robotmem:) apply.'),
        DeclareLaunchArgument('db_path', default_value='',
                              description='SQLite file of the store (empty: params_file, '
                                          'else ~/.robotmem/memory.db).'),
        DeclareLaunchArgument('collection', default_value='',
                              description='Default collection (empty: params_file).'),
        DeclareLaunchArgument('embed_device', default_value='',
                              description='cpu | cuda | tensorrt | auto (empty: params_file).'),
        DeclareLaunchArgument('respawn', default_value='false',
                              description='Restart the node when it exits.'),
        OpaqueFunction(function=_memory_node),
    ])
