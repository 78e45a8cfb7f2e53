"""Layered long-term memory: the pure policy.

What a memory is (scope, lifetime, version), which memories a query may see (entity and temporal
filters), how activity decays and when a memory is archived, how dense and lexical rankings fuse,
and which raw interactions get promoted to long-term memory. Every write decision here is a rule,
never a model: the same input always gives the same decision.

Nothing in this module touches a store; ``cluster.memory`` runs these rules against SQL and Milvus.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Annotated, Any, Self

from pydantic import AfterValidator, Field, JsonValue, model_validator

from cluster.core.errors import InvalidInput, LimitExceeded
from cluster.core.types import Frozen, Name, Text, as_utc, no_nul

MemoryValue = Annotated[str | dict[str, JsonValue], AfterValidator(no_nul)]
SourceId = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(no_nul)]


# --------------------------------------------------------------------------------------------- scope


class ScopeKind(StrEnum):
    USER = "user"
    SESSION = "session"
    TASK = "task"


class MemoryScope(Frozen):
    """Who a memory belongs to below the owner.

    Long-term facts and preferences belong to the user (the owner itself, so no further id);
    session state keys on the session id and task state on the task id. A task may also name the
    session it runs in, so session-bound task state can expire with the session.
    """

    kind: ScopeKind = Field(default=ScopeKind.USER, description="user, session or task.")
    session_id: Name | None = Field(default=None, description="Required for session scope.")
    task_id: Name | None = Field(default=None, description="Required for task scope.")

    @model_validator(mode="after")
    def _ids_match_kind(self) -> Self:
        if self.kind is ScopeKind.USER and (self.session_id or self.task_id):
            raise ValueError("user scope takes no session_id or task_id: long-term facts key on the user")
        if self.kind is ScopeKind.SESSION and (self.session_id is None or self.task_id is not None):
            raise ValueError("session scope needs a session_id and no task_id")
        if self.kind is ScopeKind.TASK and self.task_id is None:
            raise ValueError("task scope needs a task_id")
        return self

    @property
    def key(self) -> str:
        """The scope part of a memory's identity: ``user``, ``session:<id>`` or ``task:<id>``."""
        if self.kind is ScopeKind.SESSION:
            return f"session:{self.session_id}"
        if self.kind is ScopeKind.TASK:
            return f"task:{self.task_id}"
        return "user"

    @classmethod
    def user(cls) -> MemoryScope:
        return cls()

    @classmethod
    def session(cls, session_id: str) -> MemoryScope:
        return cls(kind=ScopeKind.SESSION, session_id=session_id)

    @classmethod
    def task(cls, task_id: str, session_id: str | None = None) -> MemoryScope:
        return cls(kind=ScopeKind.TASK, task_id=task_id, session_id=session_id)


# ------------------------------------------------------------------------------------------ lifetime


MAX_TTL_SECONDS = 100 * 366 * 24 * 3600
"""A window longer than a century is a mistake (or permanent); beyond it dates overflow."""


class TtlKind(StrEnum):
    PERMANENT = "permanent"
    SESSION = "session"
    WINDOW = "window"


class Ttl(Frozen):
    """How long a memory is valid: for good, until its session ends, or within a time window.

    A window is ``[valid_from, valid_until)``; give ``valid_until`` or ``seconds`` (counted from
    ``valid_from``, or from the write when that is empty). A window that starts in the future is
    "not yet in effect" and is filtered out like an expired one.
    """

    kind: TtlKind = Field(default=TtlKind.PERMANENT, description="permanent, session or window.")
    valid_from: datetime | None = Field(default=None, description="Window start; default the write time.")
    valid_until: datetime | None = Field(default=None, description="Window end (exclusive).")
    seconds: int | None = Field(
        default=None, ge=1, le=MAX_TTL_SECONDS, description="Window length, instead of valid_until (at most 100 years)."
    )

    @model_validator(mode="after")
    def _window_is_bounded(self) -> Self:
        if self.kind is TtlKind.WINDOW:
            if (self.valid_until is None) == (self.seconds is None):
                raise ValueError("a window ttl needs exactly one of valid_until or seconds")
            if self.valid_until is not None and self.valid_from is not None:
                if as_utc(self.valid_until) <= as_utc(self.valid_from):
                    raise ValueError("valid_until must be after valid_from")
        elif self.valid_from is not None or self.valid_until is not None or self.seconds is not None:
            raise ValueError(f"{self.kind} ttl takes no valid_from, valid_until or seconds")
        return self

    @classmethod
    def permanent(cls) -> Ttl:
        return cls()

    @classmethod
    def session(cls) -> Ttl:
        return cls(kind=TtlKind.SESSION)

    @classmethod
    def window(cls, seconds: int, valid_from: datetime | None = None) -> Ttl:
        return cls(kind=TtlKind.WINDOW, seconds=seconds, valid_from=valid_from)


class Validity(Frozen):
    """When a stored memory is in effect: ``[valid_from, expires_at)``; no end means until further notice."""

    valid_from: datetime
    expires_at: datetime | None
    session_bound: bool = Field(description="Expires when its scope's session ends.")


def validity_for(ttl: Ttl, scope: MemoryScope, now: datetime) -> Validity:
    """Turn a ttl into concrete times at write time.

    A session ttl needs a session to be bound to; it stays open until ``end_session`` closes it.
    """
    if ttl.kind is TtlKind.SESSION:
        if scope.session_id is None:
            raise InvalidInput("a session ttl needs a scope with a session_id (session scope, or task in a session)")
        return Validity(valid_from=now, expires_at=None, session_bound=True)
    if ttl.kind is TtlKind.WINDOW:
        start = as_utc(ttl.valid_from) if ttl.valid_from is not None else now
        end = as_utc(ttl.valid_until) if ttl.valid_until is not None else start + timedelta(seconds=ttl.seconds or 0)
        if end <= now:
            raise InvalidInput("the ttl window has already ended")
        return Validity(valid_from=start, expires_at=end, session_bound=False)
    return Validity(valid_from=now, expires_at=None, session_bound=False)


def is_valid_at(valid_from: datetime, expires_at: datetime | None, moment: datetime) -> bool:
    """The temporal filter: in effect at ``moment`` (started, not yet expired)."""
    return as_utc(valid_from) <= moment and (expires_at is None or moment < as_utc(expires_at))


def was_current_at(created_at: datetime, superseded_at: datetime | None, moment: datetime) -> bool:
    """Version visibility for ``as_of``: the version had been written and not yet replaced."""
    return as_utc(created_at) <= moment and (superseded_at is None or moment < as_utc(superseded_at))


# ------------------------------------------------------------------------------------------- sizes


class MemoryLimits(Frozen):
    """How large a memory may be, in UTF-8 bytes (a JSON value or metadata counts as compact JSON).

    A memory is a fact, a preference or a piece of state that gets injected into a prompt, not a
    document store: 16 KiB is about 3,000 words, far beyond what the embedding model reads (256
    word pieces, about 1 KB of English) and small enough that a ``top_k`` of 50 answers at most
    about 1 MB. Unbounded values made a 3.9 MB write take 4-5 s and one ``top_k=100`` query answer
    98 MB. Metadata (source, tags, confidence) is smaller by nature; context (neighbouring turns,
    searched but never returned) may be as long as a value.
    """

    max_value_bytes: int = Field(default=16 * 1024, ge=64, le=16 * 1024 * 1024)
    max_metadata_bytes: int = Field(default=4 * 1024, ge=64, le=16 * 1024 * 1024)
    max_context_bytes: int = Field(default=16 * 1024, ge=64, le=16 * 1024 * 1024)

    def check(
        self,
        value: str | dict[str, JsonValue],
        metadata: dict[str, JsonValue] | None = None,
        context: str | None = None,
    ) -> None:
        """Raise ``LimitExceeded`` naming the first field over its limit."""
        _within("value", _size(value), self.max_value_bytes, "max_value_bytes")
        if metadata:
            _within("metadata", _size(metadata), self.max_metadata_bytes, "max_metadata_bytes")
        if context is not None:
            _within("context", _size(context), self.max_context_bytes, "max_context_bytes")


def _size(value: str | dict[str, JsonValue]) -> int:
    if isinstance(value, str):
        return len(value.encode())
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _within(name: str, size: int, limit: int, setting: str) -> None:
    if size > limit:
        raise LimitExceeded(
            f"memory {name} is {size} bytes; the limit is {limit} bytes (memory.{setting}, "
            f"HINDSIGHT_MEMORY__{setting.upper()})"
        )


# ---------------------------------------------------------------------------------------- versions


class MemoryState(StrEnum):
    CURRENT = "current"
    SUPERSEDED = "superseded"


def next_version(previous: int | None) -> int:
    """Versions of one (owner, scope, key) count up from 1; a write supersedes the latest."""
    return 1 if previous is None else previous + 1


# ------------------------------------------------------------------------------------------ activity


class ActivityPolicy(Frozen):
    """Activity score: decays with a half-life, grows with each access, archives below a threshold.

    ``score(t) = score(t0) * 0.5 ** ((t - t0) / half_life)``; an access adds ``access_boost``
    (capped at ``max_score``). With the defaults an untouched memory falls below the threshold
    after about 100 days; one access buys about another 30.
    """

    initial: float = Field(default=1.0, gt=0)
    half_life_days: float = Field(default=30.0, gt=0)
    access_boost: float = Field(default=1.0, ge=0)
    max_score: float = Field(default=10.0, gt=0)
    archive_threshold: float = Field(default=0.1, ge=0)

    def decayed(self, score: float, since: datetime, now: datetime) -> float:
        days = max((now - as_utc(since)).total_seconds(), 0.0) / 86_400.0
        return score * math.pow(0.5, days / self.half_life_days)

    def reinforced(self, score: float, since: datetime, now: datetime) -> float:
        return min(self.decayed(score, since, now) + self.access_boost, self.max_score)

    def should_archive(self, score: float, since: datetime, now: datetime) -> bool:
        return self.decayed(score, since, now) < self.archive_threshold

    def archive_candidates_before(self, now: datetime) -> datetime:
        """Only memories whose activity was last set before this moment can be under the threshold.

        A stored score is never below ``floor`` (a write or restore sets ``initial``, an access
        adds ``access_boost``), and falling from ``floor`` to the threshold takes
        ``half_life * log2(floor / threshold)`` days. A cheap SQL pre-filter for the archive job.
        """
        floor = min(self.initial, self.access_boost) if self.access_boost > 0 else self.initial
        if self.archive_threshold <= 0:
            return datetime.min.replace(tzinfo=UTC)
        days = self.half_life_days * math.log2(max(floor / self.archive_threshold, 1.0))
        return now - timedelta(days=days)


# --------------------------------------------------------------------------------------------- ranking

_WORD = re.compile(r"\w+", re.UNICODE)

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
    return [t for t in (w.lower() for w in _WORD.findall(text)) if t not in STOPWORDS and len(t) > 1]


class RankingPolicy(Frozen):
    """How a query's candidates are ranked (the stages are in :mod:`cluster.memory.ranking`).

    Fusion is weighted reciprocal rank (``w / (k + rank)``) over each ranking's candidates; it
    needs no score calibration between cosine similarity and BM25. Lexical matching (stemmed,
    stopwords dropped) carries the larger weight: in conversational memories places and objects
    named in the question are the strongest evidence, and the small embedding model mostly adds
    paraphrases. A ``k`` smaller than the customary 60 keeps the top lexical ranks apart. After
    fusion come the entity stage (people and things the query names, recognised from the owner's
    stored entities and speakers), the temporal stage and session evidence. A third, weaker
    ranking joins the fusion: the candidates holding the owner's words nearest in meaning to the
    query's (:mod:`cluster.memory.expansion`); its similarity threshold is in the embedder's
    cosine scale (chosen with the offline MiniLM).
    The defaults were chosen by cross-validation on the LoCoMo development split (constants picked
    on three conversations, scored on the other two, all ten splits; ``bench/locomo/cv.py`` and
    docs/benchmarks.md).
    """

    rrf_k: float = Field(default=20.0, gt=0)
    dense_weight: float = Field(default=0.6, ge=0)
    lexical_weight: float = Field(default=1.0, ge=0)
    candidates: int = Field(default=100, ge=1, le=5000, description="Candidates each ranking contributes.")
    common_term_docs: int = Field(
        default=2000,
        ge=1,
        description="A query word in more of the owner's memories than this is too common to rank by lexically.",
    )
    entity_boost: float = Field(
        default=0.5, ge=0, le=10, description="Score factor (1 + x) for memories of an entity the query names."
    )
    entity_terms_lexical: bool = Field(
        default=False, description="Keep the named entities' words in the lexical query (else the entity stage alone)."
    )
    time_boost: float = Field(
        default=1.5, ge=0, le=10, description="Score factor (1 + x) for memories in a time the query names."
    )
    when_boost: float = Field(
        default=1.0, ge=0, le=10, description='Score factor (1 + x) for memories stating a time, for "when" questions.'
    )
    session_weight: float = Field(
        default=0.5, ge=0, le=10, description="Share of its session's best scores a memory gains."
    )
    session_top: int = Field(default=3, ge=1, le=50, description="How many of a session's best candidates count.")
    expansion_weight: float = Field(
        default=0.4, ge=0, description="Fusion weight of the expansion words' ranking (0: no expansion)."
    )
    expansion_per_word: int = Field(
        default=3, ge=1, le=20, description="At most this many of the owner's words stand in for each query word."
    )
    expansion_similarity: float = Field(
        default=0.6, ge=-1, le=1, description="Cosine similarity a word needs to stand in for a query word."
    )


def rrf(rank: int | None, k: float, weight: float) -> float:
    """Reciprocal-rank contribution of a 1-based rank; nothing for a memory the ranking did not return."""
    return 0.0 if rank is None else weight / (k + rank)


# ------------------------------------------------------------------------------------------ promotion


class LogStatus(StrEnum):
    """Where a logged turn stands: waiting for re-evaluation, promoted, or evaluated and kept as a raw turn."""

    PENDING = "pending"
    PROMOTED = "promoted"
    KEPT = "kept"


class PromotionReason(StrEnum):
    EXPLICIT = "explicit"
    STATE_CHANGE = "state_change"
    REFERENCED_LATER = "referenced_later"


_EXPLICIT = re.compile(
    r"\b(remember|don'?t forget|do not forget|keep in mind|note that|from now on|always|never)\b|记住|别忘|以后都",
    re.IGNORECASE,
)
_STATE_CHANGE = re.compile(
    r"\b(switched|changed|moved|migrated|updated|upgraded|submitted|completed|finished|cancell?ed|"
    r"deployed|configured|renamed|deleted|set to|is now|are now|no longer)\b|已提交|已修改|切到|改成|完成了",
    re.IGNORECASE,
)


def write_trigger(text: str) -> PromotionReason | None:
    """The immediate write rule for a raw turn: an explicit request wins over a state change."""
    if _EXPLICIT.search(text):
        return PromotionReason.EXPLICIT
    if _STATE_CHANGE.search(text):
        return PromotionReason.STATE_CHANGE
    return None


def spoken(speaker: str, text: str) -> str:
    """A logged turn as its memory holds it: who said it, then what was said.

    Questions about a conversation name its people ("What did Caroline read?"), and a turn's own
    words rarely do; an agent that logs both sides of a conversation also needs to read who said a
    promoted turn. So a promoted turn's value, and each neighbouring turn its context holds, is this.
    """
    return f"{speaker}: {text}"


class LoggedTurn(Frozen):
    """One raw interaction as the delayed re-evaluation sees it."""

    log_id: uuid.UUID
    session_id: Name
    speaker: Name
    text: Text
    at: datetime


class PromotionPolicy(Frozen):
    """When a raw turn "turned out to matter": later turns keep coming back to what it said.

    A later turn *references* an earlier one when they share at least ``min_shared_terms`` salient
    terms (non-stopword, at least ``min_term_length`` characters, or digits). A turn referenced by
    ``min_references`` later turns, at least one in another session or at least ``min_gap``
    later, is promoted.
    """

    min_shared_terms: int = Field(default=2, ge=1)
    min_term_length: int = Field(default=4, ge=1)
    min_references: int = Field(default=1, ge=1)
    min_gap: timedelta = Field(default=timedelta(hours=1))
    horizon: timedelta = Field(default=timedelta(days=90), description="Later turns beyond this do not count.")

    def salient(self, text: str) -> frozenset[str]:
        return frozenset(t for t in terms(text) if len(t) >= self.min_term_length or t.isdigit())


class Promotion(Frozen):
    """A rule's decision to turn a raw turn into a long-term memory, with the evidence."""

    log_id: uuid.UUID
    reason: PromotionReason
    referenced_by: tuple[uuid.UUID, ...] = ()
    shared_terms: tuple[str, ...] = ()


def find_promotions(turns: Sequence[LoggedTurn], policy: PromotionPolicy) -> list[Promotion]:
    """Promote the pending turns that later turns referred back to.

    ``turns`` holds one owner's log in time order (pending and already-handled turns alike, since a
    handled turn may still reference a pending one). Returns at most one promotion per turn.
    """
    ordered = sorted(turns, key=lambda t: (as_utc(t.at), str(t.log_id)))
    salient = [policy.salient(t.text) for t in ordered]
    out: list[Promotion] = []
    for i, turn in enumerate(ordered):
        if not salient[i]:
            continue
        refs: list[uuid.UUID] = []
        shared: set[str] = set()
        far = False
        for j in range(i + 1, len(ordered)):
            later = ordered[j]
            gap = as_utc(later.at) - as_utc(turn.at)
            if gap > policy.horizon:
                break
            common = salient[i] & salient[j]
            if len(common) >= policy.min_shared_terms:
                refs.append(later.log_id)
                shared |= common
                far = far or later.session_id != turn.session_id or gap >= policy.min_gap
        if len(refs) >= policy.min_references and far:
            out.append(
                Promotion(
                    log_id=turn.log_id,
                    reason=PromotionReason.REFERENCED_LATER,
                    referenced_by=tuple(refs),
                    shared_terms=tuple(sorted(shared)),
                )
            )
    return out


def promotion_target(reason: PromotionReason, session_id: str) -> tuple[MemoryScope, Ttl]:
    """Where a promoted turn goes: explicit requests and hindsight finds are long-term user facts;
    a state change is the session's current state and lives as long as the session."""
    if reason is PromotionReason.STATE_CHANGE:
        return MemoryScope.session(session_id), Ttl.session()
    return MemoryScope.user(), Ttl.permanent()


_TURN_IDS = uuid.UUID("5d0f3c4e-8a57-4c55-9a51-6f1c2b7e9d10")


def turn_log_id(owner: str, session_id: str, speaker: str, text: str, at: datetime | None) -> uuid.UUID:
    """A logged turn's id, derived from what the turn is: sending the same turn again (a retry)
    names the same log entry instead of logging it twice. Without ``at`` the same words from the
    same speaker in the same session are the same turn."""
    moment = as_utc(at).isoformat() if at is not None else ""
    return uuid.uuid5(_TURN_IDS, json.dumps([owner, session_id, speaker, text, moment], ensure_ascii=False))


# ------------------------------------------------------------------------------------ state changes

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
        found = _STATE_CHANGE.search(clause)
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
    requests = list(_EXPLICIT.finditer(before))
    if requests:
        before = before[requests[-1].end() :]
    words = [w.lower() for w in _WORD.findall(_PHRASE_BREAK.split(before)[-1])]
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
    for word in _WORD.findall(_PHRASE_BREAK.split(after)[0]):
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
