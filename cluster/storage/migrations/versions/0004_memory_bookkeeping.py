"""Memory bookkeeping: seqs that never repeat, a durable index queue, per-owner generations.

Revision ID: 0004
Revises: 0003

* ``memories.seq`` becomes ``AUTOINCREMENT`` on SQLite (a plain ``INTEGER PRIMARY KEY`` hands the
  highest seq out again once its row is deleted). Postgres' sequence never repeats already.
* ``memory_index_queue`` holds vector work committed with the SQL change and done after it.
  Every existing memory is queued: the memory vectors moved to a new Milvus collection
  (``memory_vectors``, owner/entity/scope as text instead of digests), which maintenance then
  fills from SQL by itself.
* ``memory_owners`` holds the generation number every change of an owner's memories bumps.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# The FTS5 triggers of 0002_memory: dropping the old table (SQLite's way to change a key) drops them.
_COLUMNS = "owner, key, text, context"
_NEW = "hex(new.owner), new.key, new.text, new.context"
_OLD = "hex(old.owner), old.key, old.text, old.context"
_TRIGGERS = {
    "memories_fts_ai": (
        "CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN "
        f"INSERT INTO memories_fts(rowid, {_COLUMNS}) VALUES (new.seq, {_NEW}); END"
    ),
    "memories_fts_ad": (
        "CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN "
        f"INSERT INTO memories_fts(memories_fts, rowid, {_COLUMNS}) VALUES ('delete', old.seq, {_OLD}); END"
    ),
    "memories_fts_au": (
        f"CREATE TRIGGER memories_fts_au AFTER UPDATE OF {_COLUMNS} ON memories BEGIN "
        f"INSERT INTO memories_fts(memories_fts, rowid, {_COLUMNS}) VALUES ('delete', old.seq, {_OLD}); "
        f"INSERT INTO memories_fts(rowid, {_COLUMNS}) VALUES (new.seq, {_NEW}); END"
    ),
}


def _rebuild_memories(autoincrement: bool) -> None:
    # The copy keeps every seq, so the FTS5 index (keyed by rowid = seq) stays valid.
    with op.batch_alter_table("memories", recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}):
        pass
    for sql in _TRIGGERS.values():
        op.execute(sql)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_memories(autoincrement=True)
    op.create_table(
        "memory_index_queue",
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("op", sa.String(length=16), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_memory_index_queue")),
    )
    op.create_index("ix_memory_index_queue_owner", "memory_index_queue", ["owner", "queued_at"], unique=False)
    op.create_table(
        "memory_owners",
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("owner", name=op.f("pk_memory_owners")),
    )
    # UTC digits without an offset on SQLite (what cluster.storage.db.UtcDateTime writes), timestamptz on Postgres.
    now = "strftime('%Y-%m-%d %H:%M:%f000', 'now')" if op.get_bind().dialect.name == "sqlite" else "now()"
    op.execute(
        f"INSERT INTO memory_index_queue (seq, owner, op, queued_at) SELECT seq, owner, 'upsert', {now} FROM memories"
    )


def downgrade() -> None:
    op.drop_table("memory_owners")
    op.drop_index("ix_memory_index_queue_owner", table_name="memory_index_queue")
    op.drop_table("memory_index_queue")
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_memories(autoincrement=False)
