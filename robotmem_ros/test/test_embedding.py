"""Embedding tests against the real bundled ONNX models (installed as registry packages)."""

import logging
import pathlib
import shutil
import sys

import numpy as np
import onnxruntime as ort
import pytest

from robotmem_ros.config import MemoryConfig
from robotmem_ros.embedding import Embedder, load_embedder, models, providers, session
from robotmem_ros.embedding.models import BUNDLED, FileRef
from robotmem_ros.embedding.query_cache import QueryCache
from robotmem_ros.errors import EmbeddingError

MINILM = 'minilm-l6-int8'
USE = 'use-multilingual-int8'

EN_TRIPLES = [
    ('The robot picked up the red cup.', 'The red cup was grasped by the robot.',
     'Stock markets fell sharply on Monday.'),
    ('The kitchen door is locked at night.', 'At night the door to the kitchen stays locked.',
     'My favourite colour is green.'),
    ('Battery level is low, return to the charger.', 'The battery is almost empty; go charge.',
     'The cat sleeps on the sofa.'),
]
ZH_TRIPLES = [
    ('机器人拿起了红色的杯子', '红色的杯子被机器人拿起来了', '今天股市大幅下跌'),
    ('厨房的门晚上是锁着的', '晚上厨房门会上锁', '我最喜欢的颜色是绿色'),
    ('电池电量低，请返回充电桩', '电量快用完了，去充电', '猫在沙发上睡觉'),
]


def _load(**changes) -> Embedder:
    embedder = load_embedder(MemoryConfig(embed_threads=1).replace(**changes))
    assert embedder is not None
    return embedder


@pytest.fixture(scope='module')
def minilm() -> Embedder:
    return _load(embed_model=MINILM)


@pytest.fixture(scope='module')
def use() -> Embedder:
    return _load(embed_model=USE)


@pytest.fixture(scope='module', params=[MINILM, USE])
def any_model(request, minilm, use) -> Embedder:
    return {MINILM: minilm, USE: use}[request.param]


def _cos(embedder: Embedder, a: str, b: str) -> float:
    va, vb = embedder.embed([a, b])
    return float(va @ vb)


def test_identity_of_bundled_models(minilm, use):
    assert (minilm.model_id, minilm.dim, minilm.backend, minilm.device) == \
        (MINILM, 384, 'onnx', 'cpu')
    assert (use.model_id, use.dim, use.device) == (USE, 512, 'cpu')
    assert minilm.sha256 == BUNDLED[MINILM].model.sha256
    assert use.sha256 == BUNDLED[USE].model.sha256


@pytest.mark.parametrize('anchor,similar,different', EN_TRIPLES)
def test_english_paraphrase_closer_than_unrelated(any_model, anchor, similar, different):
    assert _cos(any_model, anchor, similar) > _cos(any_model, anchor, different) + 0.2


@pytest.mark.parametrize('anchor,similar,different', ZH_TRIPLES)
def test_chinese_paraphrase_closer_than_unrelated_with_use(use, anchor, similar, different):
    assert _cos(use, anchor, similar) > _cos(use, anchor, different) + 0.2


def test_cross_lingual_pair_is_close_with_use(use):
    en, zh, other = EN_TRIPLES[0][0], ZH_TRIPLES[0][0], ZH_TRIPLES[0][2]
    assert _cos(use, en, zh) > _cos(use, en, other) + 0.2


def test_chinese_and_english_embed_to_unit_vectors(any_model):
    texts = [EN_TRIPLES[0][0], ZH_TRIPLES[0][0], '', 'x' * 5000, 'word ' * 3000]
    vectors = any_model.embed(texts)
    assert vectors.shape == (len(texts), any_model.dim)
    assert vectors.dtype == np.float32
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_batch_matches_single(any_model):
    texts = [t for triple in EN_TRIPLES + ZH_TRIPLES for t in triple] * 3
    batched = any_model.embed(texts)
    single = np.stack([any_model.embed([t])[0] for t in texts])
    # Dynamic int8 quantisation scales by the whole batch tensor: vectors move slightly
    # with batch composition (up to ~0.008 per component for USE).
    assert np.abs(batched - single).max() < 0.02
    assert np.min(np.sum(batched * single, axis=1)) > 0.995


def test_empty_batch_and_bad_inputs(minilm):
    assert minilm.embed([]).shape == (0, 384)
    with pytest.raises(EmbeddingError):
        minilm.embed('a plain string is not a batch')
    with pytest.raises(EmbeddingError):
        minilm.embed(['ok', None])


@pytest.mark.parametrize('device', ['cuda', 'tensorrt'])
def test_unavailable_gpu_falls_back_to_cpu_with_one_warning(device, caplog, tmp_path):
    wanted = {'cuda': 'CUDAExecutionProvider', 'tensorrt': 'TensorrtExecutionProvider'}[device]
    if wanted in ort.get_available_providers():
        pytest.skip(f'{wanted} is available here')
    with caplog.at_level(logging.WARNING, logger='robotmem.embedding'):
        embedder = _load(embed_model=MINILM, embed_device=device, trt_cache_dir=str(tmp_path))
    assert embedder.device == 'cpu'
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert device in warnings[0].getMessage() and 'cpu' in warnings[0].getMessage()


def test_cpu_request_logs_no_warning(caplog):
    with caplog.at_level(logging.WARNING, logger='robotmem.embedding'):
        _load(embed_model=MINILM, embed_device='cpu')
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_cpu_session_keeps_no_copy_of_the_model_bytes():
    # onnxruntime's Python session keeps the bytes it was built from (22 MiB for the default
    # model) to rebuild itself on a provider fallback, which a CPU session never needs.
    source = models.bundled(MINILM)
    held = sys.getrefcount(source.model_bytes)
    sess = session.create(source.model_bytes, source.where, 1, [providers.CPU])
    kept = sys.getrefcount(source.model_bytes)  # counted outside assert's rewriting
    assert sess.get_providers() == [providers.CPU]
    assert kept == held
    ids = np.array([[101, 7592, 102]], dtype=np.int64)
    inputs = {'input_ids': ids, 'attention_mask': np.ones_like(ids),
              'token_type_ids': np.zeros_like(ids)}
    feed = {i.name: inputs[i.name] for i in sess.get_inputs()}
    assert np.isfinite(sess.run(None, feed)[0]).all()  # the graph runs without them


def test_readability_minilm_low_for_chinese_high_for_english(minilm):
    for anchor, similar, _ in EN_TRIPLES:
        assert minilm.readability(anchor) >= 0.9
        assert minilm.readability(similar) >= 0.9
    for anchor, similar, _ in ZH_TRIPLES:
        assert minilm.readability(anchor) < 0.5
        assert minilm.readability(similar) < 0.5
    assert minilm.readability('') == 0.0


def test_readability_use_is_full(use):
    assert use.readability(ZH_TRIPLES[0][0]) == 1.0
    assert use.readability(EN_TRIPLES[0][0]) == 1.0


def test_backend_none_gives_no_embedder():
    assert load_embedder(MemoryConfig(embed_backend='none')) is None


def test_unknown_bundled_name_is_an_embedding_error():
    with pytest.raises(EmbeddingError, match='bundled models'):
        load_embedder(MemoryConfig(embed_model='no-such-model'))


def test_missing_model_package_is_an_embedding_error():
    with pytest.raises(EmbeddingError, match='not installed'):
        models.locate(FileRef('robotmem-no-such-dist', 'model.onnx', '0' * 64))


def _bundled_path(name: str) -> pathlib.Path:
    return models.locate(BUNDLED[name].model)


def test_truncated_bundled_model_fails_its_hash(tmp_path):
    copy = tmp_path / 'model.onnx'
    shutil.copyfile(_bundled_path(MINILM), copy)
    with copy.open('r+b') as f:
        f.truncate(copy.stat().st_size // 2)
    with pytest.raises(EmbeddingError, match='corrupt'):
        models.read_verified(BUNDLED[MINILM].model, copy)


def _minilm_dir(root: pathlib.Path) -> pathlib.Path:
    root.mkdir()
    shutil.copyfile(_bundled_path(MINILM), root / 'model.onnx')
    (root / 'tokenizer.json').write_bytes(models.read_verified(BUNDLED[MINILM].tokenizer))
    return root


def test_model_dir_matches_bundled_model(tmp_path, minilm):
    embedder = _load(model_dir=str(_minilm_dir(tmp_path / 'my-minilm')))
    assert (embedder.model_id, embedder.dim, embedder.sha256) == \
        ('dir:my-minilm', 384, minilm.sha256)
    texts = [t for triple in EN_TRIPLES for t in triple]
    np.testing.assert_allclose(embedder.embed(texts), minilm.embed(texts), atol=1e-5)


def test_model_dir_with_in_graph_tokenizer(tmp_path, use):
    root = tmp_path / 'use'
    root.mkdir()
    (root / 'model.onnx').symlink_to(_bundled_path(USE))
    embedder = _load(model_dir=str(root))
    assert (embedder.model_id, embedder.dim) == ('dir:use', 512)
    np.testing.assert_allclose(embedder.embed_query('hello'), use.embed_query('hello'),
                               atol=1e-6)


def test_model_dir_missing_or_corrupt_files(tmp_path):
    root = _minilm_dir(tmp_path / 'broken')
    (root / 'tokenizer.json').unlink()
    with pytest.raises(EmbeddingError, match='tokenizer.json'):
        _load(model_dir=str(root))
    (root / 'tokenizer.json').write_text('{not json')
    with pytest.raises(EmbeddingError, match='tokenizer'):
        _load(model_dir=str(root))
    model = root / 'model.onnx'
    with model.open('r+b') as f:
        f.truncate(model.stat().st_size // 3)
    with pytest.raises(EmbeddingError, match='cannot load ONNX model'):
        _load(model_dir=str(root))
    model.unlink()
    with pytest.raises(EmbeddingError, match='no model.onnx'):
        _load(model_dir=str(root))


def test_query_cache_hit_returns_same_vector(minilm):
    first = minilm.embed_query('where is the charger?')
    again = minilm.embed_query('where is the charger?')
    assert again is first
    assert not first.flags.writeable
    np.testing.assert_allclose(first, minilm.embed(['where is the charger?'])[0], atol=1e-6)


def test_query_cache_disabled_and_lru_eviction():
    calls = []

    def compute(text):
        calls.append(text)
        return np.array([len(text)], dtype=np.float32)

    off = QueryCache(0)
    off.get_or_compute('a', compute)
    off.get_or_compute('a', compute)
    assert calls == ['a', 'a'] and len(off) == 0
    calls.clear()
    lru = QueryCache(2)
    for text in ['a', 'b', 'a', 'c', 'b', 'a']:
        lru.get_or_compute(text, compute)
    # 'b' was evicted by 'c' (least recent), then 'a' by the re-added 'b'.
    assert calls == ['a', 'b', 'c', 'b', 'a']
