"""The offline MiniLM embedder: unit vectors, sentence-transformers-like similarity, integrity checks."""

from __future__ import annotations

import itertools
import random
import threading
from pathlib import Path

import numpy as np
import pytest

from cluster.core.errors import StoreUnavailable
from cluster.embedding import CachedEmbedder, OnnxMiniLMEmbedder
from cluster.embedding.onnx_minilm import (
    MODEL_SHA256,
    PASS_OVERHEAD_TOKENS,
    TOKENIZER_PATH,
    default_model_path,
    file_sha256,
    passes,
)

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
]


@pytest.fixture(scope="module")
def embedder() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder()


def test_installed_model_matches_the_pinned_hash() -> None:
    assert file_sha256(default_model_path()) == MODEL_SHA256


def test_tokenizer_ships_with_the_package() -> None:
    assert TOKENIZER_PATH.is_file()


def test_vectors_have_unit_norm_and_the_model_dimension(embedder: OnnxMiniLMEmbedder) -> None:
    vectors = np.array(embedder.embed(SENTENCES))
    assert vectors.shape == (len(SENTENCES), 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_paraphrases_are_closer_than_unrelated_sentences(embedder: OnnxMiniLMEmbedder) -> None:
    v = embedder.embed_array(SENTENCES)
    sim = v @ v.T
    # Pairs that mean nearly the same thing, as all-MiniLM-L6-v2 scores them (about 0.64-0.75)...
    for a, b in [(0, 1), (3, 4), (5, 6)]:
        assert sim[a, b] > 0.55
        # ...and each is closer to its paraphrase than to any other sentence.
        others = [sim[a, j] for j in range(len(SENTENCES)) if j not in (a, b)]
        assert sim[a, b] > max(others) + 0.3
    assert sim[0, 2] < 0.2  # eating vs carrying a baby


# Cosine similarities of the fp32 all-MiniLM-L6-v2 (sentence-transformers pooling), computed offline
# from the official weights by bench/embedding_reference.py; the int8 export must stay close.
FP32_REFERENCE = {(0, 1): 0.7553, (3, 4): 0.7369, (5, 6): 0.6433}


@pytest.fixture(scope="module")
def exact() -> OnnxMiniLMEmbedder:
    """The shipped file run as it is: fp32 arithmetic."""
    return OnnxMiniLMEmbedder(quantized=False)


# The fp32 file stays within 0.01 of the official model; int8 arithmetic moves a similarity by ~0.02.
@pytest.mark.parametrize(("quantized", "tolerance"), [(False, 0.01), (True, 0.03)])
def test_similarities_match_the_fp32_reference_model(quantized: bool, tolerance: float) -> None:
    v = OnnxMiniLMEmbedder(quantized=quantized).embed_array(SENTENCES)
    for (a, b), expected in FP32_REFERENCE.items():
        assert float(v[a] @ v[b]) == pytest.approx(expected, abs=tolerance)


def test_int8_vectors_agree_with_the_fp32_ones(embedder: OnnxMiniLMEmbedder, exact: OnnxMiniLMEmbedder) -> None:
    texts = [*SENTENCES, "Melanie: I painted a lake at sunrise last week!", "What is the deploy target of billing?"]
    cosines = (embedder.embed_array(texts) * exact.embed_array(texts)).sum(axis=1)
    assert cosines.min() > 0.97
    assert not np.allclose(cosines, 1.0, atol=1e-4)  # the default really is the other arithmetic


def test_embedding_is_deterministic_and_independent_of_batching(embedder: OnnxMiniLMEmbedder) -> None:
    alone = np.array([embedder.embed([s])[0] for s in SENTENCES])
    together = embedder.embed_array(SENTENCES * 12)  # several padded batches, sorted by length
    assert np.allclose(together[: len(SENTENCES)], alone, atol=1e-5)
    assert np.allclose(together[-len(SENTENCES) :], alone, atol=1e-5)
    assert np.array_equal(embedder.embed_array(SENTENCES), embedder.embed_array(SENTENCES))


def test_long_text_is_truncated_not_rejected(embedder: OnnxMiniLMEmbedder) -> None:
    long = " ".join(["inventory"] * 2000)
    prefix = " ".join(["inventory"] * 254)  # 254 word pieces + [CLS] + [SEP] = the 256-token limit
    a, b = embedder.embed_array([long, prefix])
    assert np.allclose(a, b, atol=1e-5)


def test_empty_input_gives_no_vectors(embedder: OnnxMiniLMEmbedder) -> None:
    assert embedder.embed([]) == []


def test_a_single_string_is_refused(embedder: OnnxMiniLMEmbedder) -> None:
    with pytest.raises(TypeError):
        embedder.embed("not a list")  # type: ignore[arg-type]


def test_concurrent_first_use_loads_once_and_agrees(embedder: OnnxMiniLMEmbedder) -> None:
    fresh = OnnxMiniLMEmbedder()
    results: list[np.ndarray] = []
    barrier = threading.Barrier(4)

    def work() -> None:
        barrier.wait()
        results.append(fresh.embed_array(SENTENCES))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(results) == 4
    for r in results:
        assert np.allclose(r, embedder.embed_array(SENTENCES), atol=1e-5)


def test_a_model_file_with_the_wrong_hash_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "model.onnx"
    bad.write_bytes(default_model_path().read_bytes()[:-1] + b"\x00")
    with pytest.raises(StoreUnavailable, match="sha256"):
        OnnxMiniLMEmbedder(model_path=bad).embed(["hello"])


def test_a_missing_model_file_is_store_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable):
        OnnxMiniLMEmbedder(model_path=tmp_path / "absent.onnx").embed(["hello"])


def test_cache_answers_repeats_without_recomputing(embedder: OnnxMiniLMEmbedder) -> None:
    cached = CachedEmbedder(embedder, maxsize=2)
    first = cached.embed(["a", "b", "a"])
    assert (cached.hits, cached.misses) == (0, 3)
    second = cached.embed(["a"])
    assert cached.hits == 1
    assert second[0] == first[0] == first[2]
    cached.embed(["c"])  # evicts "b", the least recently used
    cached.embed(["b"])
    assert cached.misses == 5
    assert cached.dimension == 384


def _cost(lengths: list[int], ranges: list[tuple[int, int]]) -> int:
    return sum(PASS_OVERHEAD_TOKENS + (end - start) * lengths[end - 1] for start, end in ranges)


def test_passes_cover_every_input_in_order_within_the_row_limit() -> None:
    lengths = sorted(random.Random(3).randint(3, 120) for _ in range(70))
    ranges = passes(lengths, 32)
    assert [i for start, end in ranges for i in range(start, end)] == list(range(70))
    assert all(0 < end - start <= 32 for start, end in ranges)
    assert passes([], 32) == []


def test_short_inputs_are_not_padded_to_a_long_one() -> None:
    assert passes([6] * 10 + [90, 95], 32) == [(0, 10), (10, 12)]
    assert passes([9, 10, 10, 11], 32) == [(0, 4)]  # alike: one pass saves the overhead


@pytest.mark.parametrize("seed", range(20))
def test_passes_are_the_cheapest_cut(seed: int) -> None:
    rng = random.Random(seed)
    lengths = sorted(rng.randint(2, 100) for _ in range(rng.randint(1, 9)))
    most = rng.randint(1, 5)
    n = len(lengths)
    cheapest = min(
        _cost(lengths, list(itertools.pairwise([0, *cuts, n])))
        for k in range(n)
        for cuts in itertools.combinations(range(1, n), k)
        if all(b - a <= most for a, b in itertools.pairwise([0, *cuts, n]))
    )
    assert _cost(lengths, passes(lengths, most)) == cheapest


def test_texts_of_unlike_length_embed_as_they_do_alone(embedder: OnnxMiniLMEmbedder) -> None:
    texts = ["Hi!", "ok", "I finally finished the painting of the lake I started last summer, with the kids.", "Yes"]
    together = np.asarray(embedder.embed(texts))
    alone = np.asarray([embedder.embed([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)
