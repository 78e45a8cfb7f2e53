"""long-term memory: versions, raw interaction log, full-text search

Revision ID: 0002_memory
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_memory"
down_revision = "0001"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
AUTO_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

# The Postgres full-text document, stored as a generated column (``search_doc``) so ranking reads
# it instead of re-parsing every matching text. Not mapped in the ORM: Postgres fills it in.
PG_TSVECTOR = (
    "(setweight(to_tsvector('english'::regconfig, coalesce(key, '')), 'C') || "
    "setweight(to_tsvector('english'::regconfig, text), 'A') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(context, '')), 'D'))"
)


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("seq", AUTO_ID, autoincrement=True, nullable=False),
        sa.Column("memory_id", sa.Uuid(), nullable=False),
        sa.Column("lineage_id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("scope_kind", sa.String(length=16), nullable=False),
        sa.Column("scope_key", sa.String(length=220), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=True),
        sa.Column("task_id", sa.String(length=200), nullable=True),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("data", JSON, nullable=True),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("entity", sa.String(length=200), nullable=True),
        sa.Column("source_ids", JSON, nullable=False),
        sa.Column("context", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("valid_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("session_bound", sa.Boolean(), nullable=False),
        sa.Column("superseded_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("superseded_by", sa.Uuid(), nullable=True),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("activity", sa.Float(), nullable=False),
        sa.Column("activity_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("access_count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_memories")),
        sa.UniqueConstraint("memory_id", name=op.f("uq_memories_memory_id")),
    )
    with op.batch_alter_table("memories", schema=None) as batch_op:
        batch_op.create_index("ix_memories_identity", ["owner", "scope_key", "key", "version"], unique=True)
        batch_op.create_index("ix_memories_owner_state", ["owner", "state", "archived_at"], unique=False)
        batch_op.create_index("ix_memories_owner_entity", ["owner", "entity"], unique=False)
        batch_op.create_index("ix_memories_lineage", ["owner", "lineage_id"], unique=False)
        batch_op.create_index("ix_memories_session", ["owner", "session_id"], unique=False)
        batch_op.create_index("ix_memories_expires", ["expires_at"], unique=False)

    op.create_table(
        "memory_log",
        sa.Column("seq", AUTO_ID, autoincrement=True, nullable=False),
        sa.Column("log_id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("speaker", sa.String(length=200), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("memory_id", sa.Uuid(), nullable=True),
        sa.Column("evaluated_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_memory_log")),
        sa.UniqueConstraint("log_id", name=op.f("uq_memory_log_log_id")),
    )
    with op.batch_alter_table("memory_log", schema=None) as batch_op:
        batch_op.create_index("ix_memory_log_owner_at", ["owner", "at"], unique=False)
        batch_op.create_index("ix_memory_log_owner_status", ["owner", "status"], unique=False)

    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        # External-content FTS5 over the memories table, kept in step by triggers. Porter stemming
        # folds "painting"/"painted" together. The owner is indexed as one token (its hex), so a
        # search can be confined to one owner's documents; the exact owner column is checked after.
        # Only changes to indexed columns touch the index, so activity bookkeeping does not rewrite it.
        columns = "owner, key, text, context"
        new = "hex(new.owner), new.key, new.text, new.context"
        old = "hex(old.owner), old.key, old.text, old.context"
        op.execute(
            f"CREATE VIRTUAL TABLE memories_fts USING fts5({columns}, "
            "content='memories', content_rowid='seq', tokenize='porter unicode61')"
        )
        op.execute(
            "CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN "
            f"INSERT INTO memories_fts(rowid, {columns}) VALUES (new.seq, {new}); END"
        )
        op.execute(
            "CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN "
            f"INSERT INTO memories_fts(memories_fts, rowid, {columns}) VALUES ('delete', old.seq, {old}); END"
        )
        op.execute(
            f"CREATE TRIGGER memories_fts_au AFTER UPDATE OF {columns} ON memories BEGIN "
            f"INSERT INTO memories_fts(memories_fts, rowid, {columns}) VALUES ('delete', old.seq, {old}); "
            f"INSERT INTO memories_fts(rowid, {columns}) VALUES (new.seq, {new}); END"
        )
    elif dialect == "postgresql":
        op.execute(f"ALTER TABLE memories ADD COLUMN search_doc tsvector GENERATED ALWAYS AS {PG_TSVECTOR} STORED")
        op.execute("CREATE INDEX ix_memories_fulltext ON memories USING gin (search_doc)")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for trigger in ("memories_fts_ai", "memories_fts_ad", "memories_fts_au"):
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        op.execute("DROP TABLE IF EXISTS memories_fts")
    elif dialect == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_memories_fulltext")
        op.execute("ALTER TABLE memories DROP COLUMN IF EXISTS search_doc")
    op.drop_table("memory_log")
    op.drop_table("memories")
