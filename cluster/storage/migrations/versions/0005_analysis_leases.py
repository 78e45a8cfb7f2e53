"""Heartbeated analysis leases: a claim names its worker and runs until a time its heartbeats move.

Revision ID: 0005_leases
Revises: 0004

A claim made before this migration has no end time; it is released to the queue here, so the
first worker after the upgrade analyses it at once (its evidence merges once, as for any retry).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_leases"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trajectories") as batch:
        batch.add_column(sa.Column("analysis_claimed_by", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("analysis_lease_until", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE trajectories SET analysis_status = 'pending' WHERE analysis_status = 'claimed'")


def downgrade() -> None:
    with op.batch_alter_table("trajectories") as batch:
        batch.drop_column("analysis_lease_until")
        batch.drop_column("analysis_claimed_by")
