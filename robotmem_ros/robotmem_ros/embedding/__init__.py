"""
On-device sentence embeddings with onnxruntime (no torch, no network).

``load_embedder(config)`` returns an :class:`Embedder` for the configured bundled model or
``model_dir``, or None when embeddings are switched off.
"""

from robotmem_ros.embedding.embedder import Embedder
from robotmem_ros.embedding.loader import load_embedder

__all__ = ['Embedder', 'load_embedder']
