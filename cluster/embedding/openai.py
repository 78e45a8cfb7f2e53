"""Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint (OpenAI, vLLM, llama.cpp, TEI, ...)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import httpx

from cluster.core.errors import StoreUnavailable

logger = logging.getLogger(__name__)


def embeddings_url(base_url: str) -> str:
    """Accept ``http://host``, ``http://host/v1`` or the full ``.../v1/embeddings`` URL."""
    url = base_url.rstrip("/")
    if url.endswith("/embeddings"):
        return url
    if url.endswith("/v1"):
        return f"{url}/embeddings"
    return f"{url}/v1/embeddings"


class OpenAIEmbedder:
    """Implements ``cluster.core.ports.Embedder`` over HTTP.

    Vectors are re-normalised to unit length here (not every server does it), and their length is
    checked against ``dimension``: a model that disagrees with the collection is a configuration
    error, reported as ``StoreUnavailable`` rather than written into the index.

    Args:
        base_url: the endpoint's base URL (see :func:`embeddings_url`).
        model: the model name sent with each request.
        dimension: the expected vector length.
        api_key: sent as a bearer token when set.
        batch_size: inputs per request.
        timeout: seconds per request.
        client: an ``httpx.Client`` to use (e.g. with custom transport); one is made otherwise.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        dimension: int,
        api_key: str | None = None,
        batch_size: int = 128,
        timeout: float = 30.0,
        client: httpx.Client | None = None,
    ) -> None:
        self._url = embeddings_url(base_url)
        self._model = model
        self._dimension = dimension
        self._batch_size = batch_size
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(timeout=timeout)
        self._headers = headers

    @property
    def dimension(self) -> int:
        return self._dimension

    def close(self) -> None:
        self._client.close()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not one string")
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            vectors.extend(self._request(list(texts[start : start + self._batch_size])))
        return vectors

    def _request(self, batch: list[str]) -> list[list[float]]:
        try:
            response = self._client.post(self._url, json={"model": self._model, "input": batch}, headers=self._headers)
            response.raise_for_status()
            data = response.json()["data"]
            rows = sorted(data, key=lambda item: item["index"])
            vectors = [[float(x) for x in row["embedding"]] for row in rows]
        except httpx.HTTPError as exc:
            raise StoreUnavailable(f"embedding endpoint {self._url} failed: {exc}") from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreUnavailable(f"embedding endpoint {self._url} returned an unexpected body: {exc}") from exc
        if len(vectors) != len(batch):
            raise StoreUnavailable(f"embedding endpoint returned {len(vectors)} vectors for {len(batch)} inputs")
        for vector in vectors:
            if len(vector) != self._dimension:
                raise StoreUnavailable(
                    f"embedding endpoint returned {len(vector)}-d vectors, configured dimension is {self._dimension}"
                )
        return [_unit(v) for v in vectors]


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        return vector
    return [x / norm for x in vector]
