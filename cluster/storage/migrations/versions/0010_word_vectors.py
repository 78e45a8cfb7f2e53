"""Word vectors shared by every process, for query expansion.

Revision ID: 0010_word_vectors
Revises: 0009_vector_builds

Empty at first: processes add the words they embed, and read the ones others embedded.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_word_vectors"
down_revision = "0009_vector_builds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "word_vectors",
        sa.Column("embedder", sa.String(length=32), nullable=False),
        sa.Column("word", sa.String(length=64), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("embedder", "word"),
    )


def downgrade() -> None:
    op.drop_table("word_vectors")
