"""The conversation a memory was told in, and whether its context is its neighbours'.

Revision ID: 0011_memory_threads
Revises: 0010_word_vectors

``thread`` is the memory's conversation (its session scope, else a session, conversation or thread
id in its metadata), indexed so that a write finds the memory told just before it. Rows written
before this revision get no thread here: 0012 links them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_memory_threads"
down_revision = "0010_word_vectors"
branch_labels = None
depends_on = None


# Plain ALTER TABLE on both databases: a batch operation would copy ``memories`` on SQLite, which
# drops its full-text triggers (see 0004).
def upgrade() -> None:
    op.add_column("memories", sa.Column("thread", sa.String(length=200), nullable=True))
    op.add_column("memories", sa.Column("context_derived", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_index("ix_memories_thread", "memories", ["owner", "thread", "seq"])


def downgrade() -> None:
    op.drop_index("ix_memories_thread", table_name="memories")
    op.execute("ALTER TABLE memories DROP COLUMN context_derived")
    op.execute("ALTER TABLE memories DROP COLUMN thread")
