"""The memory engine: pure Python over SQLite; nothing below this package imports rclpy."""

from robotmem_ros.engine.engine import MemoryEngine

__all__ = ['MemoryEngine']
