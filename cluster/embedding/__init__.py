"""Text embeddings: offline ONNX MiniLM (default) or an OpenAI-compatible endpoint."""

from cluster.embedding.cache import CachedEmbedder, uncached
from cluster.embedding.factory import build_embedder, embedder_identity
from cluster.embedding.onnx_minilm import MODEL_SHA256, QUANTIZED_SHA256, OnnxMiniLMEmbedder
from cluster.embedding.openai import OpenAIEmbedder

__all__ = [
    "MODEL_SHA256",
    "QUANTIZED_SHA256",
    "CachedEmbedder",
    "OnnxMiniLMEmbedder",
    "OpenAIEmbedder",
    "build_embedder",
    "embedder_identity",
    "uncached",
]
