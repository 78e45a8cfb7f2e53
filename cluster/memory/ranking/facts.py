"""What the ranking stages read of one candidate: its entity names, its day, its session, its text."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from cluster.memory.entities import entity_values
from cluster.memory.expansion import content_words
from cluster.memory.policy.words import key_forms, keyed
from cluster.memory.timeparse import memory_date


@dataclass(frozen=True, slots=True)
class CandidateFacts:
    """What the entity, temporal and session stages read of one candidate.

    A plain dataclass, not a model: one is made per candidate per query, from stored rows.
    ``session`` is the session the memory was told in, if known.
    """

    seq: int
    day: date
    entities: frozenset[str] = frozenset()
    text: str = ""
    session: str | None = None
    group: str = field(init=False, repr=False, compare=False)
    """What the session stage groups by: the session, else the memory's day (made once, read per query)."""
    _words: frozenset[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "group", self.session if self.session is not None else self.day.isoformat())

    def holds(self, words: Sequence[str]) -> tuple[str, ...]:
        """Those of ``words`` (lower-case content words) that are words of the text.

        The text's words are read only when one of them is in it at all: most candidates of a
        query hold none of its expansion words, and reading a text's words costs ~10 µs.
        """
        known = self._words
        if known is None:
            lowered = self.text.lower()
            words = [w for w in words if w in lowered]
            if not words:
                return ()
            # Made once per fact; two threads making it at once make the same set.
            known = frozenset(content_words(self.text))
            object.__setattr__(self, "_words", known)
        return tuple(w for w in words if w in known)


#: A metadata key names the conversation a memory was told in when it is one of these words, alone
#: or with an id-like suffix, in any style (:func:`~cluster.memory.policy.words.snake_key`): "session",
#: "session_id", "sessionNumber", "Chat-ID", "thread_no". "session_date_time" says something else.
CONVERSATION_WORDS = ("session", "conversation", "thread", "dialog", "dialogue", "chat")
ID_SUFFIXES = ("id", "", "no", "num", "number", "key")
#: Each such key, as ``snake_key`` reads it, and its precedence when a memory has several (earlier wins).
_CONVERSATION_KEYS = key_forms(CONVERSATION_WORDS, ID_SUFFIXES)

#: A conversation id is stored and indexed in this many characters (``memories.thread``).
CONVERSATION_CHARS = 200


def facts_of(
    seq: int, entity: str | None, metadata: Mapping[str, Any], text: str, session_id: str | None, valid_from: datetime
) -> CandidateFacts:
    """A candidate's facts from its stored fields: names, own day (metadata date or validity), session."""
    return CandidateFacts(
        seq=seq,
        entities=frozenset(entity_values(entity, metadata)),
        text=text,
        day=memory_date(metadata, valid_from),
        session=conversation_of(session_id, metadata),
    )


def conversation_of(session_id: str | None, metadata: Mapping[str, Any]) -> str | None:
    """The conversation a memory was told in: its session scope's id, else the text or number its
    metadata holds under a conversation key (see :data:`CONVERSATION_WORDS`).

    Metadata is free-form, so an id there may be longer than :data:`CONVERSATION_CHARS`: it is cut
    to fit, with a digest of the whole id that keeps two long ids apart.
    """
    found = session_id if session_id is not None else keyed(metadata, _CONVERSATION_KEYS, _conversation_id)
    if found is None or len(found) <= CONVERSATION_CHARS:
        return found
    digest = hashlib.sha256(found.encode()).hexdigest()[:16]
    return f"{found[: CONVERSATION_CHARS - len(digest) - 1]}#{digest}"


def _conversation_id(value: object) -> str | None:
    """A conversation id as a metadata value holds it: a non-blank text or a number (not a flag)."""
    if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
        return str(value)
    return None
