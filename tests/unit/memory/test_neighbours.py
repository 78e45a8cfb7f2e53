"""The derived context's text: both neighbours, each cut, none when there is neither."""

from __future__ import annotations

from cluster.memory.neighbours import NEIGHBOUR_CHARS, joined
from cluster.memory.service import _next_in_thread


def test_joined_keeps_each_neighbour_cut_and_none_for_no_neighbour() -> None:
    assert joined("before", "after") == "before\nafter"
    assert joined(None, "after") == "after"
    assert joined("", None) is None
    assert joined("x" * (NEIGHBOUR_CHARS + 50), "y") == "x" * NEIGHBOUR_CHARS + "\ny"


def test_the_next_write_of_a_conversation_in_a_batch_is_its_after_neighbour() -> None:
    threads = ["a", None, "b", "a", "a", "b"]
    texts = ["a1", "n", "b1", "a2", "a3", "b2"]
    assert _next_in_thread(threads, texts) == ["a2", None, "b2", "a3", None, None]
