"""
Typed errors of the memory engine.

The engine raises these and nothing else on bad input or a failing store; the ROS boundary
(and the CLI) turn them into ``success=false, error=str(exc)``. Keeping them typed lets callers
tell a caller mistake (``ValidationError``) from an operational fault (``StorageError``) without
parsing messages.
"""


class RobotMemError(Exception):
    """Base class of every error the engine raises on purpose."""


class ValidationError(RobotMemError, ValueError):
    """The request itself is wrong (empty text, bad JSON, out-of-range value)."""


class NotFoundError(RobotMemError, LookupError):
    """A referenced memory or session does not exist (or is no longer active)."""


class StorageError(RobotMemError):
    """The SQLite store failed (disk full, read-only, corrupt); stored data is untouched."""


class ConflictError(StorageError):
    """A write broke a uniqueness rule (another writer stored the same active fact first)."""


class CorruptDatabaseError(StorageError):
    """The database file fails its integrity check; it is never overwritten."""


class EmbeddingError(RobotMemError):
    """The embedding model could not be loaded or failed on an input."""


class SegmenterError(RobotMemError):
    """The Chinese segmenter's data (jieba's dictionary and tables) are missing or unreadable."""


class ConfigError(RobotMemError, ValueError):
    """A configuration value is invalid (unknown model, out-of-range threshold)."""
