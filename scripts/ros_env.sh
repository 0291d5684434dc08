# Source me: puts the venv and the colcon install space on the ROS/Python search paths.
# (install/setup.bash itself fails under `set -u`, so this sets the variables directly.)
_rm_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_rm_venv="${ROBOTMEM_VENV:-$_rm_root/.venv}"
export VIRTUAL_ENV="$_rm_venv"
export PATH="$_rm_venv/bin:$PATH"
_rm_prefixes="$_rm_root/install/robotmem_ros:$_rm_root/install/robotmem_msgs"
if [ -z "${ROS_DISTRO:-}" ]; then
  _rm_prefixes="$_rm_prefixes:$_rm_venv"
fi
export AMENT_PREFIX_PATH="$_rm_prefixes${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
export CMAKE_PREFIX_PATH="$_rm_prefixes${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
_rm_pyver="$("$_rm_venv/bin/python" -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')"
export PYTHONPATH="$_rm_root/install/robotmem_ros/lib/$_rm_pyver/site-packages:$_rm_root/install/robotmem_msgs/lib/$_rm_pyver/site-packages${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$_rm_root/install/robotmem_msgs/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
unset _rm_root _rm_venv _rm_prefixes _rm_pyver
