"""The integer-arithmetic model: derived from the pinned file, hash-checked, cached once per machine."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from cluster.core.errors import StoreUnavailable
from cluster.embedding import quantize
from cluster.embedding.onnx_minilm import MODEL_SHA256, QUANTIZED_SHA256, OnnxMiniLMEmbedder, default_model_path

TEXTS = ["The deploy target of billing is eu-west.", "Caroline went to a support group yesterday."]


@pytest.fixture(scope="module")
def derived() -> bytes:
    return quantize.derive(default_model_path())


def test_the_derivation_is_reproducible_and_matches_the_pinned_hash(derived: bytes) -> None:
    assert hashlib.sha256(derived).hexdigest() == QUANTIZED_SHA256


def test_the_first_use_caches_the_model_and_later_ones_read_it(
    tmp_path: Path, derived: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = OnnxMiniLMEmbedder(cache_dir=tmp_path).embed_array(TEXTS)
    (cached,) = tmp_path.iterdir()
    assert cached.read_bytes() == derived
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]

    def no_derivation(source: Path) -> bytes:
        raise AssertionError("derived again although the cache holds the model")

    monkeypatch.setattr(quantize, "derive", no_derivation)
    np.testing.assert_array_equal(OnnxMiniLMEmbedder(cache_dir=tmp_path).embed_array(TEXTS), first)


def test_a_damaged_cached_copy_is_derived_again(tmp_path: Path) -> None:
    expected = OnnxMiniLMEmbedder(cache_dir=tmp_path).embed_array(TEXTS)
    (cached,) = tmp_path.iterdir()
    cached.write_bytes(cached.read_bytes()[:1000])
    np.testing.assert_array_equal(OnnxMiniLMEmbedder(cache_dir=tmp_path).embed_array(TEXTS), expected)
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == QUANTIZED_SHA256


def test_a_cache_path_that_is_a_file_still_gives_the_model(tmp_path: Path) -> None:
    blocker = tmp_path / "models"
    blocker.write_text("not a directory")
    assert OnnxMiniLMEmbedder(cache_dir=blocker).embed_array(TEXTS).shape == (2, 384)
    assert blocker.read_text() == "not a directory"


def test_a_derivation_with_another_hash_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="quantized=false"):
        OnnxMiniLMEmbedder(cache_dir=tmp_path, quantized_sha256="0" * 64).embed(["hello"])
    assert quantize.quantized_model(default_model_path(), MODEL_SHA256, "0" * 64, tmp_path) is None


def test_a_failed_cache_write_leaves_no_partial_file(tmp_path: Path) -> None:
    # A directory where the cached file belongs: the rename fails after the copy was written.
    (tmp_path / f"minilm-dynamic-int8-{MODEL_SHA256[:16]}.onnx").mkdir()
    assert OnnxMiniLMEmbedder(cache_dir=tmp_path).embed_array(TEXTS).shape == (2, 384)
    assert [p.name for p in tmp_path.iterdir()] == [f"minilm-dynamic-int8-{MODEL_SHA256[:16]}.onnx"]
