"""robotmem_ros: long-term memory that runs on the robot."""
