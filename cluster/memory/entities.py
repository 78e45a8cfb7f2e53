"""Which known entities a text names: rules over the owner's stored vocabulary, no model.

The vocabulary is what the owner's memories already say about who and what they concern: their
``entity`` field and entity-like metadata values (a speaker, an author, a place; see
:data:`ENTITY_KEYS`). A query names an entity when the entity's words appear in it in order,
in any case ("caroline's" names Caroline), or when a capitalised word of at least three letters
is the start of exactly one known name's first word ("Mel" for Melanie): people shorten names in
questions. Names are never taken from a fixed list.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any

from cluster.memory.growth import PerOwner
from cluster.memory.policy.promotion import spoken
from cluster.memory.policy.words import STOPWORDS, key_forms, keyed, snake_key

#: Metadata keys whose string values name an entity of the memory, in any style and alone or as
#: ``<key>_name(s)``: "speaker", "Speaker", "speakerName", "author_names" (:func:`is_entity_key`).
ENTITY_KEYS = ("speaker", "author", "sender", "person", "people", "participants", "entity", "place", "location")
_ENTITY_KEY_FORMS = key_forms(ENTITY_KEYS, ("", "name", "names"))
#: Each entity key with its letters and digits only, as SQL can compare a stored key with it cheaply.
SQUASHED_ENTITY_KEYS = tuple(form.replace("_", "") for form in _ENTITY_KEY_FORMS)
#: The entity keys that name who said or wrote a memory, in precedence order (:func:`embedded_text`).
_SPEAKER_KEY_FORMS = key_forms(("speaker", "author", "sender"), ("", "name"))
MAX_NAME_CHARS = 60
MIN_PREFIX = 3

_WORD = re.compile(r"[^\W_]+(?:[-'’][^\W_]+)*")


def words(text: str) -> list[str]:
    """Word tokens with possessives removed ("Caroline's" -> "Caroline"), case kept."""
    return [re.sub(r"[’']s$", "", w) for w in _WORD.findall(text)]


def name_key(name: str) -> tuple[str, ...]:
    return tuple(w.lower() for w in words(name))


@lru_cache(maxsize=4096)
def is_entity_key(key: str) -> bool:
    """Does this metadata key name an entity of its memory (see :data:`ENTITY_KEYS`)?"""
    return snake_key(key) in _ENTITY_KEY_FORMS


def entity_values(entity: str | None, metadata: Mapping[str, Any]) -> set[str]:
    """The entity names one memory carries: its ``entity`` and entity-like metadata strings."""
    found = {entity} if entity else set()
    for key, value in metadata.items():
        if not isinstance(key, str) or not is_entity_key(key):
            continue
        values = value if isinstance(value, list) else [value]
        found.update(v for v in values if isinstance(v, str) and 0 < len(v) <= MAX_NAME_CHARS)
    return {v.strip() for v in found if v.strip()}


def speaker_of(metadata: Mapping[str, Any]) -> str | None:
    """Who said or wrote a memory, as its metadata names them (a speaker, then an author, then a sender)."""
    return keyed(metadata, _SPEAKER_KEY_FORMS, _name)


def _name(value: object) -> str | None:
    """A name as a metadata value holds it: a non-blank text of at most ``MAX_NAME_CHARS``."""
    if isinstance(value, str) and 0 < len(value.strip()) <= MAX_NAME_CHARS:
        return value.strip()
    return None


def embedded_text(text: str, metadata: Mapping[str, Any]) -> str:
    """What a memory's vector is made from: its text, said by its speaker when only the metadata
    names them ("Caroline: I went to the support group").

    Questions name the people of a conversation ("What did Caroline do?"), and a turn written as its
    bare words with ``{"speaker": "Caroline"}`` would embed far from them. The text the memory returns
    and its full-text document stay as written: the entity stage reads the speaker from the metadata.
    """
    speaker = speaker_of(metadata)
    return text if speaker is None or mentions(text, speaker) else spoken(speaker, text)


class Vocabulary:
    """The known entity names of one owner, ready to be looked for in texts."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._names: dict[tuple[str, ...], str] = {}
        self.words: frozenset[str] = frozenset()
        """The lower-case words of every known name."""
        self.add(names)

    def add(self, names: Iterable[str]) -> None:
        # Copy on write: queries of other threads may be reading the current mapping.
        grown = dict(self._names)
        for name in names:
            key = name_key(name)
            # A name made only of stopwords ("me", "the user") would match almost every text.
            if key and not all(w in STOPWORDS for w in key):
                grown.setdefault(key, name)
        self._names = grown
        self.words = frozenset(w for key in grown for w in key)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: str) -> bool:
        return name_key(name) in self._names

    def named_in(self, text: str) -> tuple[str, ...]:
        """The known names ``text`` names, in the order of the vocabulary's first sighting."""
        tokens = words(text)
        lowered = [t.lower() for t in tokens]
        known = self._names
        found: list[str] = []
        for key, name in known.items():
            if _contains(lowered, key):
                found.append(name)
        for token in tokens:
            if len(token) < MIN_PREFIX or not token[0].isupper() or token.lower() in STOPWORDS:
                continue
            prefix = token.lower()
            owners = [name for key, name in known.items() if key[0].startswith(prefix) and key[0] != prefix]
            if len(owners) == 1 and owners[0] not in found:
                found.append(owners[0])
        return tuple(found)


def mentions(text: str, name: str) -> bool:
    """Does ``text`` contain the words of ``name`` in order (any case)?"""
    return _contains([w.lower() for w in words(text)], name_key(name))


def _contains(tokens: list[str], key: tuple[str, ...]) -> bool:
    n = len(key)
    return any(tuple(tokens[i : i + n]) == key for i in range(len(tokens) - n + 1))


class VocabularyCache(PerOwner[Vocabulary]):
    """Each owner's vocabulary, kept in the process and grown from the memories written since.

    Names only ever need adding: a name whose memories were forgotten then boosts nothing, since
    the boost goes to memories that carry it. ``load(after_seq)`` returns the names of the owner's
    memories newer than ``after_seq`` and the newest seq it saw; at most ``owners`` are kept.
    """

    def __init__(self, owners: int = 10_000) -> None:
        super().__init__(Vocabulary, owners)

    def vocabulary(
        self, owner: str, load: Callable[[int], tuple[set[str], int]], generation: int | None = None
    ) -> Vocabulary:
        """The owner's vocabulary; ``load`` is skipped when the owner's ``generation`` (read in the
        caller's snapshot) is the one the vocabulary was last grown at: nothing was written since."""
        return self.get(owner, lambda _, after: load(after), Vocabulary.add, generation)


def without_names(text: str, names: Iterable[str]) -> str:
    """``text`` without the words of ``names`` (nor their shortened forms): what is left to match lexically."""
    keys = [name_key(n) for n in names]
    drop = {w for key in keys for w in key}
    firsts = [key[0] for key in keys if key]
    kept = [
        t
        for t in words(text)
        if t.lower() not in drop and not (len(t) >= MIN_PREFIX and any(f.startswith(t.lower()) for f in firsts))
    ]
    return " ".join(kept)
