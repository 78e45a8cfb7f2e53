"""Long-term memory tools: write, query, update, forget, and the raw log: observe turns, end sessions."""

# Annotations stay eager here: the SDK reads them.
import time
from collections.abc import Callable, Sequence
from typing import Annotated

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from pydantic import Field, JsonValue, StrictBool, StrictInt, ValidationError, WithJsonSchema

from cluster.core.errors import HindsightError
from cluster.core.types import DateTime, canonical_json
from cluster.memory.models import (
    MAX_TOP_K,
    MemoryForget,
    MemoryForgetResult,
    MemoryHit,
    MemoryObserve,
    MemoryQuery,
    MemoryQueryResult,
    MemoryRef,
    MemoryUpdate,
    MemoryWrite,
    MemoryWriteResult,
    MemoryWritesResult,
    ObserveResult,
    SessionEnd,
    SessionEndResult,
    Turn,
    short_id,
)
from cluster.memory.policy import MemoryScope, Ttl
from cluster.memory.policy.versions import MemoryState
from cluster.tools.common import Toolbox, ToolContext, answer, tool_errors, toolbox
from cluster.tools.errors import explained

HIT_TEXT_CHARS = 300
"""A hit's value in the text answer is cut here; the structured answer has it whole."""


UNRELATED_BELOW = 0.15
"""A memory found by meaning alone, this far from the query (cosine), is not served: ranking fills
top_k with whatever is nearest, and "nearest" among unrelated memories is still unrelated. Measured
with the default MiniLM embedder: unrelated sentences score about 0 to 0.1, a paraphrase 0.4 and up."""


def _related(hit: MemoryHit) -> bool:
    """Whether a hit has any sign of being about the query itself: its words, an entity, a time, or a
    meaning close enough. Support from its session is not one: it raises what the query already found."""
    why = hit.why
    if why.lexical_score is not None or why.entities or why.time or why.expanded:
        return True
    return why.dense_similarity is not None and why.dense_similarity >= UNRELATED_BELOW


def served(result: MemoryQueryResult) -> MemoryQueryResult:
    """The query's answer as served: unrelated memories left out, and a superseded version right
    after the current version of its memory when both are found (``include_history``), never above it.

    A last step over the ranking's answer (the ranking stages are cluster/memory's): what a caller
    sees, not how memories are scored.
    """
    if not result.hits:
        return result
    # A current version stays beside an older one that matched: it is what replaced it.
    history = {
        (h.memory.scope, h.memory.key) for h in result.hits if h.memory.state is MemoryState.SUPERSEDED and _related(h)
    }
    hits = [
        h
        for h in result.hits
        if _related(h) or (h.memory.state is MemoryState.CURRENT and (h.memory.scope, h.memory.key) in history)
    ]
    current: dict[tuple[MemoryScope, str], int] = {}
    for i, hit in enumerate(hits):
        if hit.memory.state is MemoryState.CURRENT:
            current.setdefault((hit.memory.scope, hit.memory.key), i)

    def place(item: tuple[int, MemoryHit]) -> tuple[int, int, int]:
        i, hit = item
        at = current.get((hit.memory.scope, hit.memory.key))
        if hit.memory.state is MemoryState.SUPERSEDED and at is not None:
            return (at, 1, i)
        return (i, 0, i)

    hits = [h for _, h in sorted(enumerate(hits), key=place)]
    lean = {m.memory_id: m for m in result.memories}
    memories = tuple(lean[h.memory.memory_id] for h in hits if h.memory.memory_id in lean)
    return result.model_copy(update={"hits": tuple(hits), "memories": memories})


def _hit_lines(result: MemoryQueryResult) -> str:
    """What a model reads: one line per memory, its value once (JSON objects compact), its day,
    against which a relative time in it ("yesterday") reads, the start of its id, which
    ``memory_update`` and ``memory_forget`` take, and whether a newer version replaced it."""
    # Said first: what the answer could not see yet (a memory_write of many indexes after it answers).
    waiting = f"{result.unindexed} memories written lately are still being indexed: found by their words only."
    lines = [waiting] if result.unindexed else []
    if not result.memories:
        return "\n".join([*lines, "No memory matches."])
    superseded = {h.memory.memory_id for h in result.hits if h.memory.state is MemoryState.SUPERSEDED}
    for i, memory in enumerate(result.memories, 1):
        value = memory.value if isinstance(memory.value, str) else canonical_json(memory.value)
        if len(value) > HIT_TEXT_CHARS:
            value = value[: HIT_TEXT_CHARS - 1] + "…"
        old = ", superseded" if memory.memory_id in superseded else ""
        where = f"{memory.day}; id {short_id(memory.memory_id)}, v{memory.version}{old}"
        lines.append(f"{i}. [{memory.key}] {' '.join(value.split())} ({where})")
    return "\n".join(lines)


def _observed(result: ObserveResult) -> str:
    """One line: what became of the turn."""
    again = "Already logged; nothing written again. " if result.repeated else ""
    stored = result.promoted
    if stored is None:
        # No tool takes a log id (the structured answer has it): the text only says what became of the turn.
        return f"{again}Logged; it stays raw until a later turn refers back to it."
    replaces = f", replaces {short_id(stored.superseded_id)}" if stored.superseded_id else ""
    reason = result.reason.value.replace("_", " ") if result.reason else "rule"
    return f"{again}Stored as [{result.key}] ({reason}; id {short_id(stored.memory_id)}, v{stored.version}{replaces})."


MAX_WRITES = 1000
"""Memories one ``memory_write`` call stores at most: one transaction, answered in well under a second."""
WRITE_ARGUMENTS = frozenset({"key", "value", "scope", "ttl", "metadata", "entity", "source_ids"})
"""What an item of ``memories`` may hold: ``memory_write``'s own arguments."""
NAMED_BAD_ITEMS = 5
"""Refused items an error names; the rest are counted."""


def _writes(items: Sequence[dict[str, JsonValue]], check: Callable[[MemoryWrite], None]) -> list[MemoryWrite]:
    """The ``memories`` of a ``memory_write`` call as writes, or a ``ToolError`` naming each refused
    item (its index and what is wrong). Two items with one key and scope are refused: the second would
    supersede the first, and the call sent again would then make two more versions instead of none."""
    problems: list[str] = []
    writes: list[MemoryWrite] = []
    first: dict[tuple[str, str], int] = {}
    for i, item in enumerate(items):
        unknown = sorted(set(item) - WRITE_ARGUMENTS)
        try:
            if unknown:
                raise ToolError(f"unknown argument {', '.join(unknown)} (memory_write's arguments only)")
            write = MemoryWrite.model_validate(item)
            check(write)
        except ValidationError as exc:
            problems.append(f"memories[{i}]: {' '.join(str(explained(exc, MemoryWrite)).split())}")
            continue
        except (HindsightError, ToolError) as exc:
            problems.append(f"memories[{i}]: {exc}")
            continue
        name = (write.scope.key, write.key)
        if name in first:
            problems.append(f"memories[{i}]: the key {write.key!r} of memories[{first[name]}] again; send one per key")
            continue
        first[name] = i
        writes.append(write)
    if problems:
        more = f" (and {len(problems) - NAMED_BAD_ITEMS} more)" if len(problems) > NAMED_BAD_ITEMS else ""
        head = f"InvalidInput: {len(problems)} of {len(items)} memories refused, none stored{more}: "
        raise ToolError(head + "; ".join(problems[:NAMED_BAD_ITEMS]))
    return writes


async def memory_write(
    ctx: ToolContext,
    key: Annotated[str | None, Field(description="Stable name of the fact, e.g. 'preferred_timezone'.")] = None,
    value: Annotated[str | dict[str, JsonValue] | None, Field(description="Text, or a JSON object for state.")] = None,
    scope: Annotated[MemoryScope | None, Field(description="user (default), session or task.")] = None,
    ttl: Annotated[Ttl | None, Field(description="permanent (default), session or a time window.")] = None,
    metadata: Annotated[
        dict[str, JsonValue] | None,
        Field(description="session_id groups a conversation; date (or Unix time) is its day; speaker who said it."),
    ] = None,
    entity: Annotated[str | None, Field(description="What it is about (person, project, tool).")] = None,
    source_ids: Annotated[list[str] | None, Field(description="Ids it was derived from.")] = None,
    memories: Annotated[
        list[dict[str, JsonValue]] | None,
        Field(
            min_length=1, max_length=MAX_WRITES, description=f"Instead: up to {MAX_WRITES}, each with these arguments."
        ),
        # Each item's schema is the one published right above it.
        WithJsonSchema({"type": "array", "items": {"type": "object"}}),
    ] = None,
) -> Annotated[CallToolResult, MemoryWriteResult]:
    """Remember across sessions: key and value, or several in memories (all stored or none; found by
    meaning seconds later). Writing a key again makes a new version, hiding the old; the same write again
    changes nothing."""
    box = toolbox(ctx)
    owner = box.owner(ctx)
    if memories is not None:
        alone = [n for n, v in (("key", key), ("value", value), ("scope", scope), ("ttl", ttl)) if v is not None]
        alone += [n for n, v in (("metadata", metadata), ("entity", entity), ("source_ids", source_ids)) if v]
        if alone:
            raise ToolError(f"InvalidInput: {', '.join(alone)} with memories: each memory carries its own")
        return await _write_many(box, owner, memories)
    if key is None or value is None:
        raise ToolError("InvalidInput: key and value are required (or memories, several at once)")
    with tool_errors():
        request = MemoryWrite(
            key=key,
            value=value,
            scope=scope or MemoryScope(),
            ttl=ttl or Ttl(),
            metadata=metadata or {},
            entity=entity,
            source_ids=tuple(source_ids or ()),
        )
    with tool_errors():
        result = await box.memory_writes.submit((owner, request))
    box.services.metrics.memory_writes.inc()
    return answer(result, result.model_dump_json())


async def _write_many(box: Toolbox, owner: str, items: Sequence[dict[str, JsonValue]]) -> CallToolResult:
    """Several memories in one unit of work, answered once stored: their vectors are made after the
    answer (:mod:`cluster.memory.indexing`), and the answer says how many of the owner's still wait."""
    memory = box.services.memory
    requests = _writes(items, lambda write: memory.writes.check(owner, write))

    def write() -> MemoryWritesResult:
        written = memory.apply_writes(owner, requests, index_later=True)
        return MemoryWritesResult(written=tuple(written), unindexed=memory.unindexed(owner))

    result = await box.call(write)
    box.services.metrics.memory_writes.inc(len(requests))
    stored = f"Stored {len(requests)} memories."
    waiting = f" {result.unindexed} still being indexed: found by their words now, by meaning in seconds."
    return answer(result, stored + waiting if result.unindexed else stored)


async def memory_query(
    query: Annotated[str, Field(description="What you want to recall, in words.")],
    ctx: ToolContext,
    entity: Annotated[str | None, Field(description="Only memories about this entity; default all.")] = None,
    scope: Annotated[
        MemoryScope | None,
        Field(description="Only this scope, as memory_write's scope; default all."),
        # Its schema is published once, with memory_write: every tool list carries it.
        WithJsonSchema({"type": "object"}),
    ] = None,
    top_k: Annotated[StrictInt, Field(ge=1, le=MAX_TOP_K, description=f"How many (at most {MAX_TOP_K}).")] = 5,
    include_history: Annotated[StrictBool, Field(description="Also superseded versions, marked as such.")] = False,
    as_of: Annotated[DateTime | None, Field(description="As memory stood at this time; default now.")] = None,
    now: Annotated[DateTime | None, Field(description="Reads 'last week' from it; default as_of.")] = None,
    detail: Annotated[StrictBool, Field(description="Also return whole memories and why each matched.")] = False,
) -> Annotated[CallToolResult, MemoryQueryResult]:
    """Recall long-term memories, ranked by meaning and words: one line each with key, value, day, the
    start of its id (for memory_update, memory_forget) and version. detail adds each memory whole and
    why it matched."""
    box = toolbox(ctx)
    owner = box.owner(ctx)
    with tool_errors():
        request = MemoryQuery(
            query=query,
            entity=entity,
            scope=scope,
            top_k=top_k,
            include_history=include_history,
            as_of=as_of,
            now=now,
        )
    start = time.perf_counter()
    # Each query on its own thread, embedded there beside its lexical stage (a hot-cache hit
    # embeds nothing): a shared embedding pass would make every query of it wait for the last
    # text, since the default int8 model embeds one text a pass.
    result = served(await box.call(box.services.memory.run_query, owner, request))
    box.services.metrics.retrieval_latency.labels("memory").observe(time.perf_counter() - start)
    return answer(result if detail else result.lean(), _hit_lines(result))


async def memory_update(
    memory_id: MemoryRef,
    value: Annotated[str | dict[str, JsonValue], Field(description="The new value: text or a JSON object.")],
    ctx: ToolContext,
    metadata: Annotated[dict[str, JsonValue] | None, Field(description="Replaces it; default keep.")] = None,
) -> MemoryWriteResult:
    """A memory's new value: a new version, same key, scope and lifetime."""
    box = toolbox(ctx)
    owner = box.owner(ctx)
    memory = box.services.memory

    def update() -> MemoryWriteResult:
        request = MemoryUpdate(memory_id=memory.memory_id(owner, memory_id), value=value, metadata=metadata)
        return memory.apply_update(owner, request)

    result = await box.call(update)
    box.services.metrics.memory_writes.inc()
    return result


async def memory_forget(
    memory_id: Annotated[MemoryRef, Field(description="As in memory_update.")], ctx: ToolContext
) -> MemoryForgetResult:
    """Delete a memory and all its versions, everywhere."""
    box = toolbox(ctx)
    owner = box.owner(ctx)
    memory = box.services.memory

    def forget() -> MemoryForgetResult:
        return memory.apply_forget(owner, MemoryForget(memory_id=memory.memory_id(owner, memory_id)))

    return await box.call(forget)


async def memory_observe(
    session_id: Annotated[str, Field(description="The conversation this turn belongs to.")],
    text: Annotated[str, Field(description="What was said, as said.")],
    ctx: ToolContext,
    speaker: Annotated[str, Field(description="Who said it.")] = "user",
    at: Annotated[DateTime | None, Field(description="When it was said; default now.")] = None,
) -> Annotated[CallToolResult, ObserveResult]:
    """Log one conversation turn; what to remember is decided by rule. 'remember ...' or
    'from now on ...' is stored at once as a user memory; a state change ('I moved to ...', 'X is now
    Y') as session state replacing the earlier one, until memory_end_session. Other turns stay raw
    until a later turn refers back (another session, or {promotion_min_gap} later). Text at most
    {max_turn_bytes} bytes; a repeated turn is logged once."""
    box = toolbox(ctx)
    owner = box.owner(ctx)
    with tool_errors():
        request = MemoryObserve(session_id=session_id, turn=Turn(speaker=speaker, text=text, at=at))
    result = await box.call(box.services.memory.apply_observe, owner, request)
    if result.promoted is not None and not result.repeated:
        box.services.metrics.memory_writes.inc()
    return answer(result, _observed(result))


async def memory_end_session(
    session_id: Annotated[str, Field(description="The session to close.")], ctx: ToolContext
) -> Annotated[CallToolResult, SessionEndResult]:
    """Close a session: its state changes and its ttl 'session' memories expire. Ending it again
    changes nothing."""
    box = toolbox(ctx)
    owner = box.owner(ctx)
    with tool_errors():
        request = SessionEnd(session_id=session_id)
    result = await box.call(box.services.memory.apply_end_session, owner, request)
    memories = "memory" if result.expired == 1 else "memories"
    return answer(result, f"Session {result.session_id} ended; {result.expired} {memories} expired.")


TOOLS = (memory_write, memory_query, memory_update, memory_forget, memory_observe, memory_end_session)
"""This module's tools, in the order the server lists them."""
