"""Link the conversations of memories written before 0011.

Revision ID: 0012_link_earlier_conversations
Revises: 0011_memory_threads

0011 gave new memories their conversation and a context derived from the memories told beside
them; rows written before it had neither, so an upgraded deployment searched its existing
conversations without their neighbours. This revision gives those rows what a write gives them
today: each first version (``version = 1``) gets its conversation, and every memory of a
conversation so linked whose writer sent no context gets the texts of the current, unexpired
memories told just before and after it. Later memories of those conversations whose context is derived are
derived again, since an earlier memory may now be their neighbour. The owners touched get a new
generation, so no process serves a query cached before.

The rules are copied here, not imported (``ranking.conversation_of``, ``neighbours.joined``): a
migration must do the same thing whenever it runs, whatever the code does later.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0012_link_earlier_conversations"
down_revision = "0011_memory_threads"
branch_labels = None
depends_on = None

_SESSION_KEYS = ("session_id", "session", "conversation_id", "thread_id")
_CONVERSATION_CHARS = 200
_NEIGHBOUR_CHARS = 1_000
_BATCH = 2_000

_memories = sa.table(
    "memories",
    sa.column("seq", sa.Integer),
    sa.column("owner", sa.String),
    sa.column("session_id", sa.String),
    sa.column("metadata", sa.JSON().with_variant(JSONB(), "postgresql")),
    sa.column("version", sa.Integer),
    sa.column("state", sa.String),
    sa.column("archived_at", sa.String),
    sa.column("expires_at", sa.DateTime(timezone=True)),
    sa.column("text", sa.Text),
    sa.column("context", sa.Text),
    sa.column("thread", sa.String),
    sa.column("context_derived", sa.Boolean),
)
_owners = sa.table("memory_owners", sa.column("owner", sa.String), sa.column("generation", sa.BigInteger))


def _conversation(session_id: str | None, metadata: Mapping[str, Any] | None) -> str | None:
    found = session_id
    if found is None:
        meta = metadata or {}
        found = next((str(meta[k]) for k in _SESSION_KEYS if isinstance(meta.get(k), str | int)), None)
    if found is None or len(found) <= _CONVERSATION_CHARS:
        return found
    digest = hashlib.sha256(found.encode()).hexdigest()[:16]
    return f"{found[: _CONVERSATION_CHARS - len(digest) - 1]}#{digest}"


def _joined(before: str | None, after: str | None) -> str | None:
    return "\n".join(text[:_NEIGHBOUR_CHARS] for text in (before, after) if text) or None


def _link_threads(conn: sa.Connection) -> dict[tuple[str, str], set[int]]:
    """Give unlinked first versions their conversation; returns the newly linked seqs by (owner, thread)."""
    m = _memories.c
    unlinked = sa.select(m.seq, m.owner, m.session_id, m.metadata).where(m.thread.is_(None), m.version == 1)
    set_thread = _memories.update().where(m.seq == sa.bindparam("b_seq")).values(thread=sa.bindparam("b_thread"))
    linked: dict[tuple[str, str], set[int]] = defaultdict(set)
    last = 0
    while page := conn.execute(unlinked.where(m.seq > last).order_by(m.seq).limit(_BATCH)).all():
        updates = []
        for seq, owner, session_id, metadata in page:
            thread = _conversation(session_id, metadata)
            if thread is not None:
                linked[(owner, thread)].add(seq)
                updates.append({"b_seq": seq, "b_thread": thread})
        if updates:
            conn.execute(set_thread, updates)
        last = page[-1].seq
    return linked


def _derive(conn: sa.Connection, owner: str, thread: str, linked: set[int]) -> None:
    """Derive the contexts of one conversation from its memories in order (as a write would)."""
    m = _memories.c
    # A memory's neighbours are the nearest current, unarchived, unexpired memories on each side.
    now = datetime.now(UTC)
    if conn.dialect.name == "sqlite":
        now = now.replace(tzinfo=None)  # stored as UTC digits without an offset
    unexpired = sa.or_(m.expires_at.is_(None), m.expires_at > now)
    current = sa.and_(m.state == "current", m.archived_at.is_(None), unexpired).label("current")
    rows = conn.execute(
        sa.select(m.seq, current, m.text, m.context, m.context_derived)
        .where(m.owner == owner, m.thread == thread)
        .order_by(m.seq)
    ).all()
    shown = [row.text if row.current else None for row in rows]
    before, after = _nearest_before(shown), _nearest_before(shown[::-1])[::-1]
    updates = []
    for i, row in enumerate(rows):
        # Rows linked now take a context where their writer sent none; the others keep a sent one.
        wanted = not row.context if row.seq in linked else row.context_derived
        context = _joined(before[i], after[i])
        if wanted and (context != row.context or not row.context_derived):
            updates.append({"b_seq": row.seq, "b_context": context})
    set_context = (
        _memories.update()
        .where(m.seq == sa.bindparam("b_seq"))
        .values(context=sa.bindparam("b_context"), context_derived=sa.true())
    )
    for start in range(0, len(updates), _BATCH):
        conn.execute(set_context, updates[start : start + _BATCH])


def _nearest_before(texts: list[str | None]) -> list[str | None]:
    """Per position, the nearest text before it that is not None."""
    out: list[str | None] = []
    last = None
    for text in texts:
        out.append(last)
        last = text if text is not None else last
    return out


def upgrade() -> None:
    conn = op.get_bind()
    linked = _link_threads(conn)
    for (owner, thread), seqs in linked.items():
        _derive(conn, owner, thread, seqs)
    owners = sorted({owner for owner, _ in linked})
    for start in range(0, len(owners), _BATCH):
        conn.execute(
            _owners.update()
            .where(_owners.c.owner.in_(owners[start : start + _BATCH]))
            .values(generation=_owners.c.generation + 1)
        )


def downgrade() -> None:
    # Links and derived contexts are what 0011's own writes make; nothing to undo.
    pass
