"""Create the onnxruntime session with the options that matter on a robot CPU."""

from __future__ import annotations

import onnxruntime as ort

from robotmem_ros.embedding import providers
from robotmem_ros.errors import EmbeddingError

# ai.onnx.contrib is the custom-op domain of onnxruntime-extensions (SentencePiece, string ops).
_CUSTOM_OP_DOMAIN = b'ai.onnx.contrib'


def needs_custom_ops(model_bytes: bytes) -> bool:
    """Whether the graph uses onnxruntime-extensions ops (e.g. an in-graph tokenizer)."""
    return _CUSTOM_OP_DOMAIN in model_bytes


def session_options(threads: int, custom_ops: bool) -> ort.SessionOptions:
    """Full graph optimisation, a bounded thread pool, and no busy-waiting between calls."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    # Spinning workers would burn a core between recalls on a robot that has other work to do.
    opts.add_session_config_entry('session.intra_op.allow_spinning', '0')
    # No CPU arena: onnxruntime's keeps the peak of the largest batch for the life of the
    # session (55 MiB after 600 texts); without it 42-45 MiB, at the same single-text and batch
    # speed (docs/performance.md, "Heap the node keeps").
    opts.enable_cpu_mem_arena = False
    opts.log_severity_level = 3
    if custom_ops:
        try:
            from onnxruntime_extensions import get_library_path
        except ImportError as exc:
            raise EmbeddingError('the model needs onnxruntime-extensions, which is not '
                                 'installed') from exc
        opts.register_custom_ops_library(get_library_path())
    return opts


def create(model_bytes: bytes, what: str, threads: int,
           provider_list: providers.ProviderList) -> ort.InferenceSession:
    """Build a session from in-memory bytes (the bytes that were hashed are the ones run)."""
    opts = session_options(threads, needs_custom_ops(model_bytes))
    try:
        sess = ort.InferenceSession(model_bytes, sess_options=opts, providers=provider_list)
    except Exception as exc:  # onnxruntime raises its own untyped exception classes
        raise EmbeddingError(f'cannot load ONNX model {what}: {exc}') from exc
    if sess.get_providers() == [providers.CPU]:
        release_model_bytes(sess)
    return sess


def release_model_bytes(sess: ort.InferenceSession) -> None:
    """
    Drop the copy of the model's bytes the Python session keeps for its whole life.

    onnxruntime's ``InferenceSession`` holds the bytes it was built from (22 MiB for the
    default model) so that it can build itself again on other providers when a GPU provider
    fails during a run. A session on the CPU alone has nothing to fall back to, and the graph
    it runs holds its own weights: the bytes are dead weight in every node
    (docs/performance.md, "The model's bytes"). A GPU session keeps them, and its fallback.
    """
    if getattr(sess, '_model_bytes', None) is not None:
        sess.disable_fallback()
        sess._model_bytes = None
