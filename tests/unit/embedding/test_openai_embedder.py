"""The OpenAI-compatible embedder, against a stub server on 127.0.0.1.

The stub stands in for a hosted ``/v1/embeddings`` endpoint (OpenAI, vLLM, TEI...): this machine has
no network, and the point is the wire format, batching, normalisation and error mapping.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from cluster.core.errors import InvalidInput, StoreUnavailable
from cluster.embedding import CachedEmbedder, OnnxMiniLMEmbedder, OpenAIEmbedder, build_embedder
from cluster.embedding.openai import embeddings_url
from cluster.settings import EmbeddingSettings


class StubHandler(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []
    dimension: ClassVar[int] = 4

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if self.path != "/v1/embeddings":
            self.send_response(404)
            self.end_headers()
            return
        # Unnormalised vectors, returned in reverse order: the client must sort by index and normalise.
        data = [
            {"object": "embedding", "index": i, "embedding": [float(len(text))] + [1.0] * (self.dimension - 1)}
            for i, text in enumerate(body["input"])
        ][::-1]
        payload = json.dumps({"object": "list", "data": data, "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass


@pytest.fixture
def stub_url() -> Iterator[str]:
    StubHandler.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), StubHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_url_forms_all_reach_the_embeddings_path() -> None:
    assert embeddings_url("http://h") == "http://h/v1/embeddings"
    assert embeddings_url("http://h/v1/") == "http://h/v1/embeddings"
    assert embeddings_url("http://h/v1/embeddings") == "http://h/v1/embeddings"


def test_vectors_come_back_in_order_normalised_and_batched(stub_url: str) -> None:
    embedder = OpenAIEmbedder(stub_url, model="m", dimension=4, api_key="sk-test", batch_size=2)
    vectors = embedder.embed(["a", "bbb", "cc"])
    embedder.close()
    assert len(vectors) == 3
    assert [round(v[0] / v[1], 6) for v in vectors] == [1.0, 3.0, 2.0]
    assert all(abs(sum(x * x for x in v) - 1.0) < 1e-9 for v in vectors)
    assert [r["body"]["input"] for r in StubHandler.requests] == [["a", "bbb"], ["cc"]]
    assert StubHandler.requests[0]["auth"] == "Bearer sk-test"
    assert StubHandler.requests[0]["body"]["model"] == "m"


def test_a_dimension_mismatch_is_store_unavailable(stub_url: str) -> None:
    embedder = OpenAIEmbedder(stub_url, model="m", dimension=384)
    with pytest.raises(StoreUnavailable, match="dimension"):
        embedder.embed(["a"])
    embedder.close()


def test_an_http_error_is_store_unavailable(stub_url: str) -> None:
    embedder = OpenAIEmbedder(f"{stub_url}/elsewhere/embeddings", model="m", dimension=4)
    with pytest.raises(StoreUnavailable):
        embedder.embed(["a"])
    embedder.close()


def test_an_unreachable_endpoint_is_store_unavailable() -> None:
    embedder = OpenAIEmbedder("http://127.0.0.1:9", model="m", dimension=4, timeout=2)
    with pytest.raises(StoreUnavailable):
        embedder.embed(["a"])
    embedder.close()


def test_build_embedder_picks_the_configured_provider(stub_url: str) -> None:
    offline = build_embedder(EmbeddingSettings())
    assert isinstance(offline, CachedEmbedder)
    assert isinstance(offline.inner, OnnxMiniLMEmbedder)
    assert isinstance(build_embedder(EmbeddingSettings(), cache_size=0), OnnxMiniLMEmbedder)

    remote = build_embedder(EmbeddingSettings(provider="openai", url=stub_url, dimension=4, model="x"))
    assert remote.dimension == 4
    assert len(remote.embed(["hello"])[0]) == 4


def test_build_embedder_rejects_inconsistent_settings() -> None:
    with pytest.raises(InvalidInput):
        build_embedder(EmbeddingSettings(provider="openai"))
    with pytest.raises(InvalidInput):
        build_embedder(EmbeddingSettings(dimension=768))
