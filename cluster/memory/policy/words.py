"""How the rules read text and metadata: content words, and metadata keys in any writer's style."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

WORD = re.compile(r"\w+", re.UNICODE)

# Function words that carry no topic; dropping them keeps the lexical side from matching everything.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such
    than that the their theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours yourself
    yourselves s t d ll m o re ve y also ever get got go going like really would could might must shall
    may let lets did does much many""".split()
)


@lru_cache(maxsize=4096)
def snake_key(key: str) -> str:
    """A metadata key as the rules read it, whatever style its writer used: lower snake case
    ("sessionId", "Session-ID" and "session id" all read "session_id"). Cached: every candidate of
    a query has its metadata read, and an owner's memories share a few keys."""
    split = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key)
    return re.sub(r"[^a-z0-9]+", "_", split.lower()).strip("_")


def described(metadata: Mapping[str, Any], value: object = None) -> Mapping[str, Any]:
    """The fields the metadata rules read of a memory (its conversation, day, entity names): its
    metadata, and the top-level fields of a JSON object value under keys the metadata does not use.

    A writer may send the turn itself as the value (``{"speaker": "Caroline", "text": "...", "date":
    "..."}``) and no metadata at all: the same fields then tell the same things.
    """
    if not isinstance(value, dict) or not value:
        return metadata
    return {**value, **metadata}


def key_forms(words: Sequence[str], suffixes: Sequence[str]) -> dict[str, int]:
    """The keys made of one of ``words``, alone (an empty suffix) or with one of ``suffixes``, as
    :func:`snake_key` reads them, each with its precedence: earlier words first, then earlier suffixes."""
    forms = (f"{word}_{suffix}" if suffix else word for word in words for suffix in suffixes)
    return {form: rank for rank, form in enumerate(forms)}


def keyed(metadata: Mapping[str, Any], forms: Mapping[str, int], read: Callable[[Any], str | None]) -> str | None:
    """What ``read`` makes of the value under the key of best precedence in ``forms`` (as
    :func:`key_forms` builds them; keys read by :func:`snake_key`) whose value it accepts (not
    ``None``); ``None`` when no such key holds one."""
    found = [
        (rank, read_value)
        for key, value in metadata.items()
        if isinstance(key, str)
        and (rank := forms.get(snake_key(key))) is not None
        and (read_value := read(value)) is not None
    ]
    return min(found)[1] if found else None


def terms(text: str) -> list[str]:
    """Lower-case word tokens without stopwords, in order (duplicates kept)."""
    return [t for t in (w.lower() for w in WORD.findall(text)) if t not in STOPWORDS and len(t) > 1]
