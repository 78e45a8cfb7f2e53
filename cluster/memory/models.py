"""Models at the memory service's boundary: writes, queries, hits, updates, turns and reports."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Annotated

from pydantic import AfterValidator, Field, JsonValue, StrictBool, StrictInt

from cluster.core.types import DateTime, Frozen, JsonObject, Name, Text, no_nul
from cluster.memory.policy.lifetime import Ttl
from cluster.memory.policy.promotion import PromotionReason
from cluster.memory.policy.scope import MemoryScope
from cluster.memory.policy.versions import MemoryState, MemoryValue, SourceId
from cluster.memory.policy.words import described
from cluster.memory.timeparse import memory_date

# --------------------------------------------------------------------------------------- API models

# Memories go into a prompt: 50 is far more than one prompt uses, and with values of at most
# 16 KiB (MemoryLimits) bounds an answer to about 1 MB.
MAX_TOP_K = 50
#: How many ids a memory's provenance (``source_ids``) holds at most.
MAX_SOURCE_IDS = 100

TopK = Annotated[
    StrictInt, Field(ge=1, le=MAX_TOP_K, description=f"How many memories to return (at most {MAX_TOP_K}).")
]


class MemoryWrite(Frozen):
    """Input of ``memory_write``: store a value under a key; a second write to the key supersedes it."""

    key: Name = Field(description="Stable name of the fact within its scope, e.g. 'preferred_timezone'.")
    value: MemoryValue = Field(description="The memory: plain text, or a JSON object for structured state.")
    scope: MemoryScope = Field(default_factory=MemoryScope, description="user, session or task.")
    ttl: Ttl = Field(default_factory=Ttl, description="permanent, session or a time window.")
    metadata: JsonObject = Field(default_factory=dict, description="Source, confidence, tags, ...")
    entity: Name | None = Field(default=None, description="What the memory is about: a person, project, tool.")
    source_ids: tuple[SourceId, ...] = Field(
        default=(), max_length=MAX_SOURCE_IDS, description="Ids it was derived from."
    )
    context: Text | None = Field(
        default=None,
        max_length=20_000,
        description=(
            "Surrounding text that helps find the memory; searched, not returned. Left out, a memory of a "
            "conversation (session scope, or a session/conversation/thread id in its metadata) gets the "
            "memories told just before and after it there; an empty string stores none."
        ),
    )


class MemoryWriteResult(Frozen):
    memory_id: uuid.UUID
    version: int
    superseded_id: uuid.UUID | None = Field(default=None, description="The version this write replaced.")


class MemoryWritesResult(Frozen):
    """Answer of ``memory_writes``: each memory's result, in the order sent."""

    written: tuple[MemoryWriteResult, ...]
    unindexed: int = Field(description="The owner's memories stored but not yet searchable by meaning.")


class MemoryQuery(Frozen):
    """Input of ``memory_query``: entity filter, then temporal filter, then hybrid ranking, top-k."""

    query: Annotated[str, Field(min_length=1, max_length=4000), AfterValidator(no_nul)]
    entity: Name | None = Field(default=None, description="Only memories about this entity.")
    scope: MemoryScope | None = Field(default=None, description="Only this scope; default all scopes.")
    top_k: TopK = 5
    include_history: StrictBool = Field(default=False, description="Also return superseded versions.")
    as_of: DateTime | None = Field(default=None, description="Answer as the memory stood at this time.")
    valid_at: DateTime | None = Field(
        default=None, description="Only memories in effect at this time (default: as_of, or now)."
    )
    now: DateTime | None = Field(
        default=None,
        description=(
            "The moment the query is asked at: its 'last week', '3 days ago' are read from it "
            "(default: as_of, or the present). It filters nothing."
        ),
    )


class MatchExplanation(Frozen):
    """Why a memory matched: which filters it passed and its score at each ranking stage."""

    entity: Name | None = Field(description="The entity filter it passed (None: no filter).")
    valid_at: datetime = Field(description="The moment the temporal filter checked validity at.")
    dense_similarity: float | None = Field(description="Cosine similarity to the query (None: not a dense hit).")
    dense_rank: int | None
    lexical_score: float | None = Field(description="Full-text relevance (higher is better).")
    lexical_rank: int | None
    fused: float = Field(description="Weighted reciprocal-rank fusion of the rankings.")
    entities: tuple[str, ...] = Field(default=(), description="Entities the query names that this memory carries.")
    time: str | None = Field(
        default=None, description="The time that matched the query's, or that answers its 'when' or 'how long'."
    )
    session_bonus: float = Field(default=0.0, description="Score added for support from its session.")
    expanded: tuple[str, ...] = Field(default=(), description="Expansion words (see the answer's expansions) it holds.")
    stages: tuple[str, ...] = Field(default=(), description="The ranking stages that raised this memory.")
    activity: float = Field(description="Activity score at query time.")


class MemoryRecord(Frozen):
    """A stored memory version as callers see it."""

    memory_id: uuid.UUID
    key: Name
    value: MemoryValue
    scope: MemoryScope
    entity: Name | None
    metadata: JsonObject
    source_ids: tuple[SourceId, ...]
    version: int
    state: MemoryState
    archived: bool
    created_at: datetime
    valid_from: datetime
    expires_at: datetime | None


class MemoryHit(Frozen):
    memory: MemoryRecord
    score: float
    why: MatchExplanation


class ServedMemory(Frozen):
    """One memory as an agent reads it by default: what it says and the day it speaks of, not how it ranked."""

    memory_id: uuid.UUID
    key: Name
    value: MemoryValue
    version: int
    day: date = Field(
        description="Its own day: a date in its metadata, else when it became valid; 'yesterday' in it reads from here."
    )
    score: float
    stages: tuple[str, ...] = Field(default=(), description="The ranking stages that found or raised it.")

    @classmethod
    def of(cls, hit: MemoryHit) -> ServedMemory:
        memory = hit.memory
        return cls(
            memory_id=memory.memory_id,
            key=memory.key,
            value=memory.value,
            version=memory.version,
            day=memory_date(described(memory.metadata, memory.value), memory.valid_from),
            score=round(hit.score, 4),
            stages=hit.why.stages,
        )


class MemoryQueryResult(Frozen):
    """The best memories for a query, best first.

    ``memories`` is the lean view an agent reads; ``hits`` holds each memory whole (scope, metadata,
    lifetime) with why it matched, stage by stage (the MCP tool sends them only with ``detail``).
    """

    memories: tuple[ServedMemory, ...] = ()
    hits: tuple[MemoryHit, ...] = ()
    candidates: int = Field(description="Memories left after the entity and temporal filters that any ranking hit.")
    expansions: tuple[str, ...] = Field(
        default=(), description="Words of the owner's memories that stood in for the query's words."
    )
    unindexed: int = Field(
        default=0, description="The owner's memories stored but not yet searchable by meaning: found by their words."
    )
    cached: bool = False

    def lean(self) -> MemoryQueryResult:
        """The same answer without the whole memories and their explanations."""
        return self.model_copy(update={"hits": ()})


# A query's text shows the first 8 hex digits of each memory's id: the rest cost a model some 20 tokens
# a line, and among an owner's 100,000 memories another shares a given one's 8 digits about 1 time in 40,000.
SHORT_ID_DIGITS = 8
MemoryRef = Annotated[
    str,
    Field(
        min_length=SHORT_ID_DIGITS,
        max_length=36,
        pattern=r"^[0-9a-fA-F-]+$",
        description=f"The memory's id, or its first {SHORT_ID_DIGITS} or more hex digits as memory_query shows them.",
    ),
]


def short_id(memory_id: uuid.UUID) -> str:
    """The part of a memory's id a query's text shows (and ``memory_update``/``memory_forget`` take)."""
    return memory_id.hex[:SHORT_ID_DIGITS]


def id_range(ref: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The first and last id a reference can mean: a whole id is its own range, a prefix every id
    starting with its digits (ids order as their hex digits on both databases)."""
    digits = ref.replace("-", "").lower()
    if not SHORT_ID_DIGITS <= len(digits) <= 32 or not set(digits) <= set("0123456789abcdef"):
        raise ValueError(
            f"memory_id must be a memory's id or its first {SHORT_ID_DIGITS}+ hex digits as memory_query shows them, "
            f"got {ref!r}"
        )
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


class MemoryUpdate(Frozen):
    """Input of ``memory_update``: a new version of the memory's value (and metadata, if given)."""

    memory_id: uuid.UUID
    value: MemoryValue
    metadata: JsonObject | None = Field(default=None, description="Replaces the metadata; default keep it.")


class MemoryForget(Frozen):
    """Input of ``memory_forget``: remove the memory and all its versions, from every store."""

    memory_id: uuid.UUID


class MemoryForgetResult(Frozen):
    memory_id: uuid.UUID
    removed_versions: int


class Turn(Frozen):
    """One raw interaction for the log: cheap to write, re-evaluated later."""

    speaker: Name = Field(default="user")
    text: Annotated[str, Field(min_length=1, max_length=20_000), AfterValidator(no_nul)]
    at: DateTime | None = Field(default=None, description="When it happened; default now.")
    metadata: JsonObject = Field(default_factory=dict)


class MemoryObserve(Frozen):
    """Input of ``memory_observe``: one turn of a session for the raw log."""

    session_id: Name
    turn: Turn


class ObserveResult(Frozen):
    log_id: uuid.UUID
    promoted: MemoryWriteResult | None = Field(default=None, description="Set when a rule stored it at once.")
    reason: PromotionReason | None = None
    key: Name | None = Field(
        default=None, description="The stored memory's key; a state change's names what changed ('state:...')."
    )
    repeated: bool = Field(
        default=False, description="The turn was logged before: nothing was written again; promoted names what was."
    )


class SessionEnd(Frozen):
    """Input of ``memory_end_session``."""

    session_id: Name


class SessionEndResult(Frozen):
    session_id: Name
    expired: int = Field(ge=0, description="Memories bound to the session that expired now.")


class MaintenanceReport(Frozen):
    """What a maintenance job (re-evaluation, decay, purge) changed."""

    scanned: int = 0
    changed: int = 0
    memory_ids: tuple[uuid.UUID, ...] = ()
    failed_owners: tuple[str, ...] = Field(default=(), description="Owners whose step raised (logged); the rest ran.")


def value_text(value: str | dict[str, JsonValue]) -> str:
    """The searchable text of a value: the string itself, or ``key: value`` lines for a JSON object."""
    if isinstance(value, str):
        return value
    return "\n".join(f"{k}: {_flatten(v)}" for k, v in value.items())


def _flatten(value: JsonValue) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k} {_flatten(v)}" for k, v in value.items())
    if isinstance(value, list):
        return " ".join(_flatten(v) for v in value)
    return "" if value is None else str(value)
