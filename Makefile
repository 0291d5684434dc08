# One-command entry points (README "Quick start"). Everything runs inside the pinned venv
# (ROBOTMEM_VENV overrides its path) with the colcon install space on the paths.
# ROS_DISTRO_WHEELS=kilted (default) or jazzy selects the ROS 2 wheels, e.g.
#   make test ROS_DISTRO_WHEELS=jazzy      # venv .venv-jazzy, install space install-jazzy/
SHELL := /bin/bash
ROS_DISTRO_WHEELS ?= kilted
export ROS_DISTRO_WHEELS
.SHELLFLAGS := -eu -o pipefail -c
ENV := source scripts/ros_env.sh && export PYTHONPATH="$(CURDIR)/robotmem_ros:$$PYTHONPATH"
PYTEST_ARGS ?=
NODE_ARGS ?=

.PHONY: build run test lint bench soak

build:
	@scripts/setup_env.sh

run: build
	@echo '--------------------------------------------------------------------------------'
	@echo "robotmem node starting (default store $${ROBOTMEM_HOME:-$$HOME/.robotmem}/memory.db; Ctrl-C stops)"
	@echo 'Call it from another shell, after: cd $(CURDIR) && source scripts/ros_env.sh'
	@echo '  python -c "import rclpy; from robotmem_ros.client import MemoryClient; rclpy.init(); \'
	@echo "m = MemoryClient(rclpy.create_node('cli')); m.wait_ready(10); \\"
	@echo "print(m.learn('the red cup is on the left shelf')); print(m.recall('red cup'))\""
	@echo 'On a robot with ROS 2:'
	@echo "  ros2 service call /robotmem/learn robotmem_msgs/srv/Learn \"{insight: 'the red cup is on the left shelf'}\""
	@echo "  ros2 service call /robotmem/recall robotmem_msgs/srv/Recall \"{query: 'red cup'}\""
	@echo '--------------------------------------------------------------------------------'
	@$(ENV) && exec python -m robotmem_ros.node.memory_node $(NODE_ARGS)

test: build
	@$(ENV) && python -m pytest robotmem_ros/test -m 'not slow' -q $(PYTEST_ARGS)

lint: build
	@$(ENV) && python -m pytest -q robotmem_ros/test/test_flake8.py robotmem_ros/test/test_pep257.py

bench: build
	@$(ENV) && if [ -f bench/run_all.py ]; then python bench/run_all.py; \
	  else echo 'bench/run_all.py not present yet: nothing to run'; fi

soak: build
	@$(ENV) && python -m pytest robotmem_ros/test -m slow -q $(PYTEST_ARGS)
