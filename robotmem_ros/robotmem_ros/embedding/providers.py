"""
Map ``embed_device`` to onnxruntime execution providers, falling back to CPU.

A robot image may ship a CPU-only onnxruntime, or a GPU build on a machine without the driver;
memory must still work there, so an unavailable provider degrades to CPU with exactly one
warning that names what actually runs.
"""

from __future__ import annotations

import logging
import pathlib
from typing import Any, Sequence

logger = logging.getLogger('robotmem.embedding')

CPU = 'CPUExecutionProvider'
CUDA = 'CUDAExecutionProvider'
TENSORRT = 'TensorrtExecutionProvider'

_DEVICE_OF = {CPU: 'cpu', CUDA: 'cuda', TENSORRT: 'tensorrt'}
# Preference chain per requested device; CPU always closes the list.
_CHAIN = {'cpu': (), 'cuda': (CUDA,), 'tensorrt': (TENSORRT, CUDA), 'auto': (TENSORRT, CUDA)}

ProviderList = list[Any]


def tensorrt_options(cache_dir: pathlib.Path, fp16: bool) -> dict[str, Any]:
    """Options that make TensorRT reuse built engines across restarts (minutes on a Jetson)."""
    return {
        'trt_engine_cache_enable': True,
        'trt_engine_cache_path': str(cache_dir),
        'trt_timing_cache_enable': True,
        'trt_timing_cache_path': str(cache_dir),
        'trt_fp16_enable': fp16,
    }


def plan(device: str, available: Sequence[str], trt_cache_dir: pathlib.Path,
         trt_fp16: bool) -> ProviderList:
    """List the providers to try for ``device``, best first, restricted to what this build has."""
    if device not in _CHAIN:
        raise ValueError(f'unknown embed_device {device!r}')
    chosen: ProviderList = []
    for name in _CHAIN[device]:
        if name not in available:
            continue
        if name == TENSORRT:
            trt_cache_dir.mkdir(parents=True, exist_ok=True)
            chosen.append((TENSORRT, tensorrt_options(trt_cache_dir, trt_fp16)))
        else:
            chosen.append(name)
    return chosen + [CPU]


def device_of(session_providers: Sequence[str]) -> str:
    """Device name of the provider a session actually runs first."""
    return _DEVICE_OF.get(session_providers[0], 'cpu') if session_providers else 'cpu'


def report_fallback(requested: str, actual: str, available: Sequence[str]) -> None:
    """Warn once when the device that runs is not the one that was asked for."""
    if requested in ('cpu', 'auto') or requested == actual:
        return
    logger.warning(
        'embed_device=%s requested but it is not usable here (onnxruntime providers: %s); '
        'embeddings run on %s', requested, ', '.join(available), actual)
