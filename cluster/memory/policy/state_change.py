"""What a state change is about: the key under which the next change of the same thing supersedes it."""

from __future__ import annotations

import re

from cluster.memory.policy.promotion import EXPLICIT, STATE_CHANGE
from cluster.memory.policy.words import WORD, terms

_CLAUSE = re.compile(r"(?<=[.!?;])\s+|\n+|[，。；！？]")
_PHRASE_BREAK = re.compile(r"[,:()\[\]—–]|\s-\s")
# Words between a subject and its verb that say nothing about what changed; the ones in
# _PASSIVE mean the subject is what changed ("the order was cancelled").
_AUXILIARY = frozenset(
    "was were is are am be been being has have had got gets get just finally recently already now also "
    "successfully m s ve re d ll".split()
)
_PASSIVE = frozenset("was were is are am be been being got gets get".split())
_COPULAR = frozenset({"is now", "are now", "no longer", "set to"})
# The object of a change ends where its new value or a new clause starts.
_OBJECT_END = frozenset(
    "to into from on onto in at for with by as over and but because so since after before then "
    "yesterday today tomorrow".split()
)
_DETERMINERS = frozenset("the a an my our your his her their its this that these those".split())
_FIRST_PERSON = frozenset({"i", "we"})
_OTHER_PRONOUNS = frozenset({"you", "he", "she", "they", "it", "this", "that", "there"})
_CJK_SUBJECT = re.compile(r"^(我们|咱们|我|你们|你|已经|把|将)+")
MAX_THING_TERMS = 4


def state_key(text: str, speaker: str) -> str | None:
    """The memory key of what a state change is about, so a later change of it supersedes this one.

    The thing that changed is, in order: the verb's object ("we switched *the database* to
    MySQL", "I cancelled *the order*"); the subject when it underwent the change ("*the order* was
    cancelled", "*the build* is now green"); else the subject together with the verb ("*I moved*
    to Berlin", "*we switched* to Postgres": where the speaker lives, what they use). First person
    means the speaker. The thing's words are lower-cased and stopwords dropped, so the same thing in
    other words of no weight ("my", "the", "has been") gets the same key. ``None`` when the turn
    names no state change or names it only by a pronoun ("she is now ..."): such a turn keeps a
    key of its own.
    """
    for clause in _CLAUSE.split(text):
        found = STATE_CHANGE.search(clause)
        if found is None:
            continue
        marker = " ".join(found.group(0).lower().split())
        before, after = clause[: found.start()], clause[found.end() :]
        if not marker.isascii():
            thing = _cjk_thing(before, after)
            return _key(thing) if thing else None
        return _english_key(marker, before, after, speaker)
    return None


def _english_key(marker: str, before: str, after: str, speaker: str) -> str | None:
    obj = [] if marker in _COPULAR else _object_terms(after)
    if obj:
        return _key("-".join(obj[:MAX_THING_TERMS]))
    # "remember that the API is now v2": the request is not part of the subject.
    requests = list(EXPLICIT.finditer(before))
    if requests:
        before = before[requests[-1].end() :]
    words = [w.lower() for w in WORD.findall(_PHRASE_BREAK.split(before)[-1])]
    passive = marker in _COPULAR
    while words and words[-1] in _AUXILIARY:
        passive = passive or words[-1] in _PASSIVE
        words.pop()
    if words and words[-1] in _OTHER_PRONOUNS:
        return None
    first_person = not words or words[-1] in _FIRST_PERSON
    if first_person:
        # What the speaker underwent ("I was moved", "I am now ...") is not a thing the words name.
        return None if passive else _key(f"{speaker}:{marker.replace('canceled', 'cancelled')}")
    subject = terms(" ".join(_noun_phrase(words)))[:MAX_THING_TERMS]
    if not subject:
        return None
    thing = "-".join(subject)
    return _key(thing if passive else f"{thing}:{marker}")


def _noun_phrase(words: list[str]) -> list[str]:
    """The subject's noun phrase: from its first determiner on ("I think *the build*"), up to a
    preposition ("*the deploy target* for the backend")."""
    starts = [i for i, w in enumerate(words) if w in _DETERMINERS]
    phrase = words[starts[0] + 1 :] if starts else words
    for i, word in enumerate(phrase):
        if word in _OBJECT_END:
            return phrase[:i]
    return phrase


def _object_terms(after: str) -> list[str]:
    out: list[str] = []
    for word in WORD.findall(_PHRASE_BREAK.split(after)[0]):
        lowered = word.lower()
        if lowered in _OBJECT_END:
            break
        out.append(lowered)
    return terms(" ".join(out))


def _cjk_thing(before: str, after: str) -> str:
    """Chinese puts the thing before the marker ("订单已提交", "把时区改成 UTC"), or after it once the
    subject is dropped ("我已提交报告")."""
    thing = _CJK_SUBJECT.sub("", before.strip()).strip()
    return "-".join((thing or after.strip()).lower().split())[:60]


def _key(thing: str) -> str:
    return f"state:{thing}"[:200]
