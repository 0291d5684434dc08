"""The ``robotmem`` operator command line (no ROS needed)."""
