"""Multi-agent runs: a trajectory may name the run it is one role of.

Revision ID: 0008_trajectory_runs
Revises: 0007_scheduled_jobs

Existing trajectories get no run: each stays attributed on its own, as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_trajectory_runs"
down_revision = "0007_scheduled_jobs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trajectories") as batch:
        batch.add_column(sa.Column("run_id", sa.String(length=200), nullable=True))
        batch.create_index("ix_trajectories_run", ["owner", "run_id"])


def downgrade() -> None:
    with op.batch_alter_table("trajectories") as batch:
        batch.drop_index("ix_trajectories_run")
        batch.drop_column("run_id")
