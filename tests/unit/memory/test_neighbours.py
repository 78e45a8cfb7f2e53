"""The derived context's text: both neighbours, each cut, none when there is neither."""

from __future__ import annotations

from cluster.memory.neighbours import NEIGHBOUR_CHARS, joined, next_in_thread
from cluster.memory.ranking import CONVERSATION_CHARS, conversation_of


def test_joined_keeps_each_neighbour_cut_and_none_for_no_neighbour() -> None:
    assert joined("before", "after") == "before\nafter"
    assert joined(None, "after") == "after"
    assert joined("", None) is None
    assert joined("x" * (NEIGHBOUR_CHARS + 50), "y") == "x" * NEIGHBOUR_CHARS + "\ny"


def test_the_next_write_of_a_conversation_in_a_batch_is_its_after_neighbour() -> None:
    threads = ["a", None, "b", "a", "a", "b"]
    texts = ["a1", "n", "b1", "a2", "a3", "b2"]
    assert next_in_thread(threads, texts) == ["a2", None, "b2", "a3", None, None]


def test_a_conversation_is_the_session_scope_else_a_session_key_of_the_metadata_cut_to_its_column() -> None:
    assert conversation_of("s-1", {"session_id": "other"}) == "s-1"
    assert conversation_of(None, {"thread_id": 7, "note": "x"}) == "7"
    assert conversation_of(None, {"session_id": ["not", "an", "id"]}) is None
    long_a, long_b = "a" * 300, "a" * 299 + "b"
    cut_a, cut_b = conversation_of(None, {"session_id": long_a}), conversation_of(None, {"conversation_id": long_b})
    assert cut_a is not None
    assert cut_b is not None
    assert len(cut_a) == len(cut_b) == CONVERSATION_CHARS
    assert cut_a != cut_b
    assert conversation_of(None, {"session": "a" * CONVERSATION_CHARS}) == "a" * CONVERSATION_CHARS


def test_a_conversation_key_is_read_in_any_style_and_a_key_that_says_something_else_is_not() -> None:
    for key in ("session", "sessionId", "Session-ID", "session number", "session_no", "chatId", "Dialogue", "thread"):
        assert conversation_of(None, {key: 3}) == "3", key
    for key in ("session_date_time", "sessionDateTime", "chat_log", "threads", "session_length"):
        assert conversation_of(None, {key: "x"}) is None, key
    # Several: the session's id first, then the bare word, then other suffixes, then the other words.
    assert conversation_of(None, {"chat_id": "c", "session": "s", "sessionId": "id"}) == "id"
    assert conversation_of(None, {"chat_id": "c", "session_number": "n"}) == "n"
    # Neither a flag nor a blank names a conversation.
    assert conversation_of(None, {"session": True, "thread": " "}) is None
