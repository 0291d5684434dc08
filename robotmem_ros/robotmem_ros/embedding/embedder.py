"""
Sentence embedders over an onnxruntime session.

Two graph shapes exist in the wild: graphs that take token ids (the tokenizer runs here, the
vectors are mean-pooled over the attention mask unless the graph pools itself) and graphs that
take raw strings (the tokenizer is a custom op inside the graph and the output is pooled).
"""

from __future__ import annotations

import abc
from typing import Sequence

import numpy as np
import onnxruntime as ort

from robotmem_ros.embedding.pooling import l2_normalize, mean_pool
from robotmem_ros.embedding.query_cache import QueryCache
from robotmem_ros.embedding.text_encoder import TextEncoder
from robotmem_ros.errors import EmbeddingError

BATCH_SIZE = 32
# Outputs that already hold one vector per text (sentence-transformers / optimum exports).
# ``pooler_output`` is deliberately absent: BERT's CLS pooler is not a sentence embedding.
_POOLED_OUTPUTS = ('sentence_embedding', 'sentence_embeddings', 'embeddings', 'outputs')
_TOKEN_INPUTS = ('input_ids', 'attention_mask', 'token_type_ids')
_INT_TYPES = {'tensor(int64)': np.int64, 'tensor(int32)': np.int32}


class Embedder(abc.ABC):
    """What the engine uses: vectors, a cached query vector, and a readability score."""

    backend = 'onnx'

    def __init__(self, session: ort.InferenceSession, *, model_id: str, sha256: str,
                 device: str, cache_size: int) -> None:
        self.session = session
        self.model_id = model_id
        self.sha256 = sha256
        self.device = device
        self._cache = QueryCache(cache_size)
        self.dim = self._output_dim()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 vectors [len(texts), dim]; raises only EmbeddingError."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise EmbeddingError('embed() takes a sequence of str')
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        try:
            vectors = self._embed(list(texts))
        except EmbeddingError:
            raise
        except Exception as exc:  # onnxruntime / tokenizers raise untyped errors
            raise EmbeddingError(f'embedding failed: {exc}') from exc
        return l2_normalize(vectors)

    def embed_query(self, text: str) -> np.ndarray:
        """Vector [dim] of one query, through the LRU cache (read-only array)."""
        return self._cache.get_or_compute(text, lambda t: self.embed([t])[0])

    @abc.abstractmethod
    def readability(self, text: str) -> float:
        """Share (0..1) of the text's tokens the model can actually read."""

    @abc.abstractmethod
    def _embed(self, texts: list[str]) -> np.ndarray:
        """Raw (not yet normalised) vectors of a non-empty list of texts."""

    @abc.abstractmethod
    def _output_node(self) -> ort.NodeArg:
        """Return the output the vectors are read from."""

    def _output_dim(self) -> int:
        """Vector size from the graph, or from one probe run when the graph leaves it symbolic."""
        last = self._output_node().shape[-1]
        if isinstance(last, int) and last > 0:
            return last
        return int(self._embed(['dimension probe']).shape[-1])


class TokenEmbedder(Embedder):
    """Graph fed with token ids; texts are length-sorted so each batch pads little."""

    def __init__(self, session: ort.InferenceSession, encoder: TextEncoder, **kw: object) -> None:
        inputs = session.get_inputs()
        unknown = [i.name for i in inputs if i.name not in _TOKEN_INPUTS]
        if unknown or 'input_ids' not in [i.name for i in inputs]:
            raise EmbeddingError(f'unsupported model inputs {[i.name for i in inputs]}; '
                                 f'expected {", ".join(_TOKEN_INPUTS)}')
        self._input_types = {i.name: _INT_TYPES.get(i.type, np.int64) for i in inputs}
        self._encoder = encoder
        self._output, self._pooled = _pick_output(session.get_outputs())
        super().__init__(session, **kw)  # type: ignore[arg-type]

    def readability(self, text: str) -> float:
        return self._encoder.readability(text)

    def _output_node(self) -> ort.NodeArg:
        return self._output

    def _embed(self, texts: list[str]) -> np.ndarray:
        encodings = self._encoder.encode(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out: np.ndarray | None = None
        for start in range(0, len(order), BATCH_SIZE):
            rows = order[start:start + BATCH_SIZE]
            vectors = self._run([encodings[i] for i in rows])
            if out is None:
                out = np.empty((len(texts), vectors.shape[-1]), dtype=np.float32)
            out[rows] = vectors
        assert out is not None
        return out

    def _run(self, encodings: list) -> np.ndarray:
        batch = self._encoder.pad(encodings)
        arrays = {'input_ids': batch.input_ids, 'attention_mask': batch.attention_mask,
                  'token_type_ids': np.zeros_like(batch.input_ids)}
        feed = {name: arrays[name].astype(dtype, copy=False)
                for name, dtype in self._input_types.items()}
        result = self.session.run([self._output.name], feed)[0]
        return result if self._pooled else mean_pool(result, batch.attention_mask)


class StringEmbedder(Embedder):
    """Graph fed with raw strings; it tokenizes, pools and normalises inside."""

    def __init__(self, session: ort.InferenceSession, **kw: object) -> None:
        self._input = session.get_inputs()[0].name
        self._output = session.get_outputs()[0]
        super().__init__(session, **kw)  # type: ignore[arg-type]

    def readability(self, text: str) -> float:
        # SentencePiece covers every script by falling back to bytes: nothing is unreadable.
        return 1.0

    def _output_node(self) -> ort.NodeArg:
        return self._output

    def _embed(self, texts: list[str]) -> np.ndarray:
        chunks = [np.array(texts[i:i + BATCH_SIZE], dtype=object)
                  for i in range(0, len(texts), BATCH_SIZE)]
        parts = [self.session.run([self._output.name], {self._input: chunk})[0]
                 for chunk in chunks]
        return np.concatenate(parts).astype(np.float32, copy=False)


def takes_strings(session: ort.InferenceSession) -> bool:
    """Whether the graph tokenizes itself (a single string input)."""
    inputs = session.get_inputs()
    return len(inputs) == 1 and inputs[0].type == 'tensor(string)'


def _pick_output(outputs: Sequence[ort.NodeArg]) -> tuple[ort.NodeArg, bool]:
    """Choose (output, already_pooled): a named sentence vector, else token vectors to pool."""
    for node in outputs:
        if node.name in _POOLED_OUTPUTS and len(node.shape) == 2:
            return node, True
    for node in outputs:
        if len(node.shape) == 3:
            return node, False
    for node in outputs:
        if len(node.shape) == 2:
            return node, True
    raise EmbeddingError(f'no usable output among {[o.name for o in outputs]}')
