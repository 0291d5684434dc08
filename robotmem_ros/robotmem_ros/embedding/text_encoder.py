"""
Turn texts into padded id/mask arrays with a HuggingFace ``tokenizer.json``.

Uses the ``tokenizers`` library only (no transformers/torch). Padding is done here, per batch,
to the longest text in it: the fixed 128-token padding many exported tokenizer.json files carry
made every call pay for 128 tokens whatever the text length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

# Sorted as the linter's import-order check wants (it counts robotmem_ros as third party).
from robotmem_ros.errors import EmbeddingError
from tokenizers import Encoding, Tokenizer

# Used when tokenizer.json has no truncation of its own: BERT-family position tables end here.
DEFAULT_MAX_LENGTH = 512


@dataclass(frozen=True)
class Batch:
    """Model inputs for a batch of texts (int64, shape [n, longest])."""

    input_ids: np.ndarray
    attention_mask: np.ndarray


class TextEncoder:
    """Tokenizer with per-batch padding and an [UNK]-share measure."""

    def __init__(self, tokenizer_json: str, max_length: int = 0) -> None:
        try:
            tokenizer = Tokenizer.from_str(tokenizer_json)
        except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
            raise EmbeddingError(f'cannot parse tokenizer.json: {exc}') from exc
        padding = tokenizer.padding or {}
        truncation = tokenizer.truncation or {}
        self.pad_id: int = int(padding.get('pad_id', 0))
        self.max_length: int = max_length or int(truncation.get('max_length',
                                                                DEFAULT_MAX_LENGTH))
        tokenizer.no_padding()
        tokenizer.enable_truncation(self.max_length)
        self._tokenizer = tokenizer
        unk = getattr(tokenizer.model, 'unk_token', None)
        self.unk_id: int | None = tokenizer.token_to_id(unk) if unk else None

    def encode(self, texts: Sequence[str]) -> list[Encoding]:
        """Tokenize (with special tokens, truncated to max_length)."""
        return self._tokenizer.encode_batch(list(texts))

    def pad(self, encodings: Sequence[Encoding]) -> Batch:
        """Pad encodings to the longest one of the batch."""
        longest = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), longest), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), longest), dtype=np.int64)
        for row, enc in enumerate(encodings):
            ids[row, :len(enc.ids)] = enc.ids
            mask[row, :len(enc.ids)] = 1
        return Batch(ids, mask)

    def readability(self, text: str) -> float:
        """Share of the text's own tokens (special tokens excluded) that are not unknown."""
        if self.unk_id is None:
            return 1.0
        enc = self._tokenizer.encode(text)
        own = [tid for tid, special in zip(enc.ids, enc.special_tokens_mask) if not special]
        if not own:
            return 0.0
        return sum(tid != self.unk_id for tid in own) / len(own)
