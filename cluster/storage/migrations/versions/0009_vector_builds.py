"""Which embedder built each vector collection.

Revision ID: 0009_vector_builds
Revises: 0008_trajectory_runs

Empty at first: the first process to start records its own embedder for each collection.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_vector_builds"
down_revision = "0008_trajectory_runs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "vector_builds",
        sa.Column("collection", sa.String(length=200), nullable=False),
        sa.Column("embedder", sa.String(length=500), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("collection"),
    )


def downgrade() -> None:
    op.drop_table("vector_builds")
