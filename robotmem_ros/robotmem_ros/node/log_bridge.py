"""
Forward Python ``logging`` of the engine to the ROS logger.

The engine never imports rclpy, so it logs with the standard library; without this bridge its
warnings (embedder fallback, failed batches) would go to stderr unformatted and never reach
/rosout, where robot operators look.
"""

from __future__ import annotations

import logging
from typing import Any

_LOGGER_NAMES = ('robotmem', 'robotmem_ros')


class RosLogHandler(logging.Handler):
    """Logging handler that writes records through an rclpy logger."""

    def __init__(self, ros_logger: Any) -> None:
        super().__init__(logging.DEBUG)
        self._ros_logger = ros_logger
        self.setFormatter(logging.Formatter('[%(name)s] %(message)s'))

    def emit(self, record: logging.LogRecord) -> None:
        """Send one record at the matching ROS severity."""
        try:
            text = self.format(record)
            if record.levelno >= logging.CRITICAL:
                self._ros_logger.fatal(text)
            elif record.levelno >= logging.ERROR:
                self._ros_logger.error(text)
            elif record.levelno >= logging.WARNING:
                self._ros_logger.warning(text)
            elif record.levelno >= logging.INFO:
                self._ros_logger.info(text)
            else:
                self._ros_logger.debug(text)
        except Exception:  # logging must never raise into the engine
            self.handleError(record)


def install(ros_logger: Any, level: int = logging.INFO) -> RosLogHandler:
    """Route the engine's loggers to ``ros_logger``; returns the handler for ``uninstall``."""
    handler = RosLogHandler(ros_logger)
    for name in _LOGGER_NAMES:
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False
    return handler


def uninstall(handler: RosLogHandler) -> None:
    """Detach ``handler`` and restore default propagation."""
    for name in _LOGGER_NAMES:
        logger = logging.getLogger(name)
        logger.removeHandler(handler)
        logger.propagate = True
