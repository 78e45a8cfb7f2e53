"""The memory service's hot statements, built once per shape and bound per call.

A query runs half a dozen statements, and a write half a dozen more (its version, the vector
work it queues and clears, the owner's generation twice); building each from ORM expressions took
as long as running it (every ``IN`` list item, comparison and ``or_`` is an object made, coerced
and cache-keyed again on every call). Here each statement is a Core statement with bound
parameters, made once per *shape* — which filters a read carries — and given its values at
execution, so a call costs a dictionary and the database's own work.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    Delete,
    Float,
    Integer,
    Select,
    Table,
    bindparam,
    column,
    delete,
    func,
    insert,
    or_,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite

from cluster.memory.policy.versions import MemoryState
from cluster.memory.tables import FTS_TABLE, IndexOp, MemoryIndexQueueRow, MemoryOwnerRow, MemoryRow

MEMORIES: Table = MemoryRow.__table__  # type: ignore[assignment]
_m = MEMORIES.c
OWNERS: Table = MemoryOwnerRow.__table__  # type: ignore[assignment]
QUEUE: Table = MemoryIndexQueueRow.__table__  # type: ignore[assignment]

# Column weights for full-text relevance: the value's text counts most, the key a little less,
# surrounding context (neighbouring turns) a third.
KEY_WEIGHT = 0.5
TEXT_WEIGHT = 1.0
CONTEXT_WEIGHT = 0.3


class Shape(NamedTuple):
    """Which optional filters a read carries: each combination is one prebuilt statement."""

    entity: bool
    scope: bool
    as_of: bool
    history: bool


def owned_by_seq() -> ColumnElement[bool]:
    """The owner constraint for statements that address rows by ``seq``.

    Wrapped in ``coalesce`` on purpose: without statistics, SQLite's planner prefers an equality on
    an indexed ``owner`` over a primary-key ``IN`` list and scans all of the owner's rows.
    """
    return func.coalesce(_m.owner, "") == bindparam("owner")


def visible_conditions(shape: Shape, *, by_seq: bool) -> list[ColumnElement[bool]]:
    """The entity filter, the temporal filter and version/archive state, with bound values.

    Parameters: ``owner``, ``valid_at`` and, as the shape asks, ``entity``, ``scope_key``, ``as_of``
    (see :func:`visible_params`).
    """
    owned = owned_by_seq() if by_seq else _m.owner == bindparam("owner")
    conds: list[ColumnElement[bool]] = [owned, _m.archived_at.is_(None)]
    if shape.entity:
        conds.append(_m.entity == bindparam("entity"))
    if shape.scope:
        conds.append(_m.scope_key == bindparam("scope_key"))
    valid_at = bindparam("valid_at", type_=_m.valid_from.type)
    conds.append(_m.valid_from <= valid_at)
    conds.append(or_(_m.expires_at.is_(None), _m.expires_at > valid_at))
    if shape.as_of:
        as_of = bindparam("as_of", type_=_m.created_at.type)
        conds.append(_m.created_at <= as_of)
        if not shape.history:
            conds.append(or_(_m.superseded_at.is_(None), _m.superseded_at > as_of))
    elif not shape.history:
        conds.append(_m.state == MemoryState.CURRENT)
    return conds


def shape_and_params(
    owner: str,
    *,
    valid_at: Any,
    entity: str | None,
    scope_key: str | None,
    as_of: Any,
    include_history: bool,
) -> tuple[Shape, dict[str, Any]]:
    """A read's shape and the values its statement binds."""
    shape = Shape(entity is not None, scope_key is not None, as_of is not None, include_history)
    params: dict[str, Any] = {"owner": owner, "valid_at": valid_at}
    if entity is not None:
        params["entity"] = entity
    if scope_key is not None:
        params["scope_key"] = scope_key
    if as_of is not None:
        params["as_of"] = as_of
    return shape, params


def _row_columns() -> list[Any]:
    """Every column of a memory row, ``metadata`` under its mapped name ``meta`` (rows read as the ORM's)."""
    return [c.label("meta") if c.name == "metadata" else c for c in MEMORIES.columns]


def _seqs() -> Any:
    return _m.seq.in_(bindparam("seqs", expanding=True))


@lru_cache(maxsize=64)
def visible_seqs(shape: Shape) -> Select[Any]:
    """Which of ``:seqs`` pass the filters (ids only)."""
    return select(_m.seq).where(_seqs(), *visible_conditions(shape, by_seq=True))


@lru_cache(maxsize=64)
def visible_rows(shape: Shape) -> Select[Any]:
    """The whole rows of those of ``:seqs`` that pass the filters."""
    return select(*_row_columns()).where(_seqs(), *visible_conditions(shape, by_seq=True))


@lru_cache(maxsize=2)
def latest(*, lock: bool) -> Select[Any]:
    """The newest version of ``(:owner, :scope_key, :key)``, current or not; ``lock`` takes its row lock."""
    stmt = (
        select(*_row_columns())
        .where(_m.owner == bindparam("owner"), _m.scope_key == bindparam("scope_key"), _m.key == bindparam("key"))
        .order_by(_m.version.desc())
        .limit(1)
    )
    return stmt.with_for_update() if lock else stmt


@lru_cache(maxsize=1)
def insert_version() -> Any:
    """One new version (values by column name), returning its ``seq``."""
    return insert(MEMORIES).returning(_m.seq)


@lru_cache(maxsize=1)
def candidate_facts() -> Select[Any]:
    """What the ranking stages read of ``:seqs`` (the owner's; visibility was checked before)."""
    return select(_m.seq, _m.entity, _m["metadata"], _m.text, _m.session_id, _m.valid_from, _m.data).where(
        owned_by_seq(), _seqs()
    )


@lru_cache(maxsize=8)
def entity_names(keys: tuple[str, ...], *, first: bool, dialect: str) -> Any:
    """The distinct entity names of the owner's memories after ``:after`` (the ``entity`` column and
    string values of metadata or JSON object value keys that, with only their letters and digits kept, lower case, are
    one of ``keys``), and the newest seq among them, in one statement (one snapshot): a row
    ``(newest, NULL, NULL)``, then a row ``(NULL, key, name)`` per name (the key NULL for the column).

    The database makes the names distinct: a large owner has ~100k rows and a dozen names. The first
    load reads the owner's rows by the owner index; later ones by seq range (``owned_by_seq``), so
    only the few rows written since are read.
    """
    owned = "m.owner = :owner" if first else "coalesce(m.owner, '') = :owner"
    where = f"{owned} AND m.seq > :after"
    table = f"{MEMORIES.name} AS m"
    # The metadata's fields, and a JSON object value's (``policy.described``).
    if dialect == "postgresql":
        # jsonb_each raises on anything but an object, and one such row would fail every query.
        each = "jsonb_each(CASE jsonb_typeof(m.{0}) WHEN 'object' THEN m.{0} END)"
        value, is_text = "j.value #>> '{}'", "jsonb_typeof(j.value) = 'string'"
    else:
        each, value, is_text = "json_each(m.{0})", "j.value", "j.type = 'text'"
    wanted = ", ".join(f":key{i}" for i in range(len(keys)))
    squashed = "lower(replace(replace(replace(replace(j.key, '_', ''), '-', ''), ' ', ''), '.', ''))"
    fields = " ".join(
        f"UNION SELECT j.key, {value} FROM {table}, {each.format(column)} AS j "
        f"WHERE {where} AND {squashed} IN ({wanted}) AND {is_text} "
        for column in ("metadata", "data")
    )
    return text(
        f"SELECT (SELECT max(m.seq) FROM {table} WHERE {where}), NULL, NULL "
        f"UNION ALL SELECT NULL, key, name FROM ("
        f"SELECT NULL AS key, m.entity AS name FROM {table} WHERE {where} AND m.entity IS NOT NULL "
        f"{fields}"
        ") AS names"
    ).bindparams(**{f"key{i}": k for i, k in enumerate(keys)})


@lru_cache(maxsize=2)
def texts_after(*, first: bool) -> Select[Any]:
    """The text of the owner's memories after ``:after`` and before ``:before`` (by the owner index
    first, then by seq range)."""
    owned = _m.owner == bindparam("owner") if first else owned_by_seq()
    return select(_m.seq, _m.text).where(owned, _m.seq > bindparam("after"), _m.seq < bindparam("before"))


@lru_cache(maxsize=1)
def unindexed() -> Select[int, Any]:
    """How many of ``:owner``'s memories wait for their vectors, and the first of them after ``:after``."""
    waiting = (QUEUE.c.owner == bindparam("owner")) & (QUEUE.c.op == IndexOp.UPSERT)
    first = func.min(QUEUE.c.seq).filter(QUEUE.c.seq > bindparam("after"))
    return select(func.count(), first).where(waiting)


@lru_cache(maxsize=1)
def generation() -> Select[Any]:
    return select(OWNERS.c.generation).where(OWNERS.c.owner == bindparam("owner"))


def _upsert(table: Table, dialect: str) -> Any:
    # Both dialects have an INSERT ... ON CONFLICT statement, with the same interface.
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)


@lru_cache(maxsize=2)
def bump_generation(dialect: str) -> Any:
    """Add one to ``:owner``'s generation (its row made at 1 the first time)."""
    stmt = _upsert(OWNERS, dialect).values(owner=bindparam("owner"), generation=1)
    return stmt.on_conflict_do_update(index_elements=[OWNERS.c.owner], set_={"generation": OWNERS.c.generation + 1})


@lru_cache(maxsize=2)
def queue_index(dialect: str) -> Any:
    """Queue vector work, one parameter set per seq (``seq``, ``owner``, ``op``, ``queued_at``);
    a seq already queued takes the new operation and time."""
    stmt = _upsert(QUEUE, dialect)
    return stmt.on_conflict_do_update(
        index_elements=[QUEUE.c.seq], set_={"op": stmt.excluded.op, "queued_at": stmt.excluded.queued_at}
    )


@lru_cache(maxsize=1)
def index_done() -> Delete:
    """Remove ``:owner``'s queued work of operation ``:op`` for ``:seqs``."""
    return delete(QUEUE).where(
        QUEUE.c.owner == bindparam("owner"),
        QUEUE.c.op == bindparam("op"),
        QUEUE.c.seq.in_(bindparam("seqs", expanding=True)),
    )


@lru_cache(maxsize=2)
def queued(*, of_owner: bool) -> Select[Any]:
    """Work queued up to ``:before`` (of ``:owner`` when ``of_owner``), oldest first, ``:limit`` items."""
    stmt = select(QUEUE.c.seq, QUEUE.c.owner, QUEUE.c.op).where(QUEUE.c.queued_at <= bindparam("before"))
    if of_owner:
        stmt = stmt.where(QUEUE.c.owner == bindparam("owner"))
    return stmt.order_by(QUEUE.c.queued_at, QUEUE.c.seq).limit(bindparam("limit"))


@lru_cache(maxsize=64)
def fts5_ranked(shape: Shape) -> Select[Any]:
    """The owner's visible hits among the ``:inner`` best FTS5 matches of ``:match``, best ``:limit``,
    each row carrying how many matches were ranked."""
    ranked = (
        text(
            f"SELECT rowid AS seq, bm25({FTS_TABLE}, 0.0, {KEY_WEIGHT}, {TEXT_WEIGHT}, {CONTEXT_WEIGHT}) AS rank "
            f"FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH :match ORDER BY rank, rowid LIMIT :inner"
        )
        .columns(column("seq", Integer), column("rank", Float))
        .cte("ranked")
    )
    total = select(func.count()).select_from(ranked).scalar_subquery()
    return (
        select(_m.seq, ranked.c.rank, total)
        .join(ranked, _m.seq == ranked.c.seq)
        .where(*visible_conditions(shape, by_seq=True))
        .order_by(ranked.c.rank, _m.seq)  # equal ranks: the older memory first, in every run
        .limit(bindparam("limit"))
    )
