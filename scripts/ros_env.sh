# Source me: puts the venv, the colcon install space and its executables on the search paths.
# (install/setup.bash itself fails under `set -u`, so this sets the variables directly.)
#
# ROS_DISTRO_WHEELS picks the ROS 2 wheels (kilted, the default, or jazzy); each distro has its
# own venv (.venv, .venv-jazzy; ROBOTMEM_VENV overrides) and install space (install/,
# install-jazzy/), because messages built against one distro do not load in the other.
_rm_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${ROS_DISTRO_WHEELS:-kilted}" in
  kilted) _rm_suffix='' ;;
  jazzy) _rm_suffix='-jazzy' ;;
  *) echo "ros_env.sh: ROS_DISTRO_WHEELS must be kilted or jazzy, not '$ROS_DISTRO_WHEELS'" >&2
     return 1 2>/dev/null || exit 1 ;;
esac
_rm_venv="${ROBOTMEM_VENV:-$_rm_root/.venv$_rm_suffix}"
_rm_install="$_rm_root/install$_rm_suffix"
export ROBOTMEM_INSTALL="$_rm_install"
export VIRTUAL_ENV="$_rm_venv"
_rm_prefixes="$_rm_install/robotmem_ros:$_rm_install/robotmem_msgs"
# composition_interfaces, built from ../shared/ros2-tools when present (launch_ros needs it).
_rm_tools="$_rm_root/build-tools$_rm_suffix/install/composition_interfaces"
_rm_libs="$_rm_install/robotmem_msgs/lib"
_rm_pyver="$("$_rm_venv/bin/python" -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')"
_rm_pypath="$_rm_install/robotmem_ros/lib/$_rm_pyver/site-packages:$_rm_install/robotmem_msgs/lib/$_rm_pyver/site-packages"
if [ -d "$_rm_tools" ]; then
  _rm_prefixes="$_rm_prefixes:$_rm_tools"
  _rm_libs="$_rm_libs:$_rm_tools/lib"
  _rm_pypath="$_rm_pypath:$_rm_tools/lib/$_rm_pyver/site-packages"
fi
if [ -z "${ROS_DISTRO:-}" ]; then
  _rm_prefixes="$_rm_prefixes:$_rm_venv"
fi
# Sourced again for the other distro, the first one's entries must go: left behind, a Jazzy
# process loaded Kilted's message libraries and died on a symbol lookup error. Another
# checkout's messages cannot be told from a user's own workspace by their path: they stay, and
# are named, because which of two robotmem_msgs libraries a process loads was not decided by
# the order of the paths.
_rm_others() {  # $1: a variable's name, $2: its value; prints the value without our entries
  local entry kept=''
  local -a entries
  IFS=: read -ra entries <<< "${2:-}"
  for entry in "${entries[@]}"; do
    case "$entry" in
      "$_rm_root"/install | "$_rm_root"/install/* | "$_rm_root"/install-jazzy | \
      "$_rm_root"/install-jazzy/* | "$_rm_root"/.venv | "$_rm_root"/.venv/* | \
      "$_rm_root"/.venv-jazzy | "$_rm_root"/.venv-jazzy/* | "$_rm_root"/build-tools*) continue ;;
      */robotmem_msgs | */robotmem_msgs/*)
        echo "ros_env.sh: $1 holds another checkout's $entry; its message libraries may load" \
          "instead of this checkout's (symbol lookup errors): source this from a new shell" >&2 ;;
    esac
    kept="${kept:+$kept:}$entry"
  done
  printf '%s' "$kept"
}
_rm_path="$(_rm_others PATH "$PATH")"
_rm_ament="$(_rm_others AMENT_PREFIX_PATH "${AMENT_PREFIX_PATH:-}")"
_rm_cmake="$(_rm_others CMAKE_PREFIX_PATH "${CMAKE_PREFIX_PATH:-}")"
_rm_python="$(_rm_others PYTHONPATH "${PYTHONPATH:-}")"
_rm_ld="$(_rm_others LD_LIBRARY_PATH "${LD_LIBRARY_PATH:-}")"
# The console scripts (robotmem, robotmem_replay, robotmem_node) are installed where `ros2 run`
# looks for them, lib/robotmem_ros, not bin/: put that directory on PATH too.
export PATH="$_rm_install/robotmem_ros/lib/robotmem_ros:$_rm_venv/bin${_rm_path:+:$_rm_path}"
export AMENT_PREFIX_PATH="$_rm_prefixes${_rm_ament:+:$_rm_ament}"
export CMAKE_PREFIX_PATH="$_rm_prefixes${_rm_cmake:+:$_rm_cmake}"
export PYTHONPATH="$_rm_pypath${_rm_python:+:$_rm_python}"
export LD_LIBRARY_PATH="$_rm_libs${_rm_ld:+:$_rm_ld}"
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
unset _rm_root _rm_suffix _rm_venv _rm_install _rm_prefixes _rm_tools _rm_libs _rm_pyver _rm_pypath \
  _rm_path _rm_ament _rm_cmake _rm_python _rm_ld
unset -f _rm_others
