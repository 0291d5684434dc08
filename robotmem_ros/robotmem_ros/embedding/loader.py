"""``load_embedder``: configuration in, ready embedder (or None for BM25-only) out."""

from __future__ import annotations

import logging
import pathlib
import time

import onnxruntime as ort

from robotmem_ros.config import MemoryConfig
from robotmem_ros.embedding import models, providers, session
from robotmem_ros.embedding.embedder import Embedder, StringEmbedder, takes_strings, TokenEmbedder
from robotmem_ros.embedding.text_encoder import TextEncoder
from robotmem_ros.errors import EmbeddingError

logger = logging.getLogger('robotmem.embedding')


def load_embedder(config: MemoryConfig) -> Embedder | None:
    """Load the configured model; None when ``embed_backend == 'none'``."""
    if config.embed_backend == 'none':
        return None
    started = time.perf_counter()
    source = models.from_dir(config.model_dir) if config.model_dir else \
        models.bundled(config.embed_model)
    available = ort.get_available_providers()
    provider_list = providers.plan(config.embed_device, available, _trt_cache_dir(config),
                                   config.trt_fp16)
    sess = session.create(source.model_bytes, source.where, config.embed_threads, provider_list)
    device = providers.device_of(sess.get_providers())
    providers.report_fallback(config.embed_device, device, available)
    embedder = _wrap(sess, source, device, config.query_cache_size)
    logger.info('embedding model %s (%d-d, sha256 %s...) on %s loaded in %.2f s',
                embedder.model_id, embedder.dim, embedder.sha256[:12], device,
                time.perf_counter() - started)
    return embedder


def _wrap(sess: ort.InferenceSession, source: models.ModelSource, device: str,
          cache_size: int) -> Embedder:
    identity = {'model_id': source.model_id, 'sha256': source.sha256, 'device': device,
                'cache_size': cache_size}
    if takes_strings(sess):
        return StringEmbedder(sess, **identity)
    if source.tokenizer_json is None:
        raise EmbeddingError(f'{source.where} takes token ids but no tokenizer.json is next '
                             f'to it')
    return TokenEmbedder(sess, TextEncoder(source.tokenizer_json, source.max_length), **identity)


def _trt_cache_dir(config: MemoryConfig) -> pathlib.Path:
    if config.trt_cache_dir:
        return pathlib.Path(config.trt_cache_dir).expanduser()
    return config.resolved_db_path().parent / 'trt_cache'
