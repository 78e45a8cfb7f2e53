"""Choose the embedder the settings ask for."""

from __future__ import annotations

from cluster.core.errors import InvalidInput
from cluster.core.ports import Embedder
from cluster.embedding.cache import CachedEmbedder
from cluster.embedding.onnx_minilm import DIMENSION, OnnxMiniLMEmbedder
from cluster.embedding.openai import OpenAIEmbedder
from cluster.settings import EmbeddingSettings


def build_embedder(settings: EmbeddingSettings, *, cache_size: int = 1024) -> Embedder:
    """The configured embedder behind an LRU cache (``cache_size=0`` disables the cache).

    Nothing is loaded or contacted here: the ONNX model loads on first use.

    Raises:
        InvalidInput: the settings are inconsistent (openai without a URL, wrong dimension for MiniLM).
    """
    inner: Embedder
    if settings.provider == "onnx-minilm":
        if settings.dimension != DIMENSION:
            raise InvalidInput(f"onnx-minilm makes {DIMENSION}-d vectors, embedding.dimension is {settings.dimension}")
        inner = OnnxMiniLMEmbedder(threads=settings.threads, quantized=settings.quantized, cache_dir=settings.cache_dir)
    elif settings.provider == "openai":
        if not settings.url:
            raise InvalidInput("embedding.provider=openai needs embedding.url")
        inner = OpenAIEmbedder(
            settings.url,
            model=settings.model,
            dimension=settings.dimension,
            api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        )
    else:  # pragma: no cover - the Literal type makes this unreachable
        raise InvalidInput(f"unknown embedding provider {settings.provider!r}")
    return CachedEmbedder(inner, cache_size) if cache_size > 0 else inner


def embedder_identity(settings: EmbeddingSettings) -> str:
    """What decides the vectors the settings' embedder makes: provider, model, arithmetic, dimension.

    Two settings with the same identity make comparable vectors; the URL, key and threads do not count.
    """
    if settings.provider == "onnx-minilm":
        return f"onnx-minilm all-MiniLM-L6-v2 {'int8' if settings.quantized else 'fp32'} {DIMENSION}d"
    return f"{settings.provider} {settings.model} {settings.dimension}d"
