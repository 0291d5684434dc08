"""Client of the robotmem node for manipulation nodes: typed calls, futures, ready wait."""

from robotmem_ros.client.errors import (ExecutorDeadlockError, MemoryClientError,
                                        ServiceTimeoutError, ServiceUnavailableError)
from robotmem_ros.client.memory_client import MemoryClient

__all__ = ['ExecutorDeadlockError', 'MemoryClient', 'MemoryClientError', 'ServiceTimeoutError',
           'ServiceUnavailableError']
