"""
The memory engine: pure Python over SQLite; nothing below this package imports rclpy.

``MemoryEngine`` is loaded on first use (PEP 562), so importing one engine module, or this
package, does not pull in numpy and the whole engine.
"""

from typing import Any

__all__ = ['MemoryEngine']


def __getattr__(name: str) -> Any:
    """Load ``MemoryEngine`` when it is first asked for."""
    if name == 'MemoryEngine':
        from robotmem_ros.engine.engine import MemoryEngine
        return MemoryEngine
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
