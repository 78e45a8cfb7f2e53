"""One head again, and a durable "to index" mark on experience templates.

Revision ID: 0003
Revises: 0002_experience, 0002_memory
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = ("0002_experience", "0002_memory")
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A template whose SQL row changed after its vector was written: the indexer re-embeds it.
    # It is set in the transaction that changes the row, so a Milvus failure after the commit
    # leaves the mark behind instead of losing the change.
    with op.batch_alter_table("experience_templates") as batch:
        batch.add_column(sa.Column("index_pending", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_index(
        "ix_experience_templates_index_pending", "experience_templates", ["index_pending", "owner"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_experience_templates_index_pending", table_name="experience_templates")
    with op.batch_alter_table("experience_templates") as batch:
        batch.drop_column("index_pending")
