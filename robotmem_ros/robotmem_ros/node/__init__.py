"""ROS 2 side of robotmem: the memory node and its adapters around the engine."""
