"""trajectories and nodes

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "trajectories",
        sa.Column("trajectory_id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("agent_id", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=200), nullable=False),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("task_type", sa.String(length=200), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("outcome", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True),
        sa.Column("node_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finalized_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("analysis_status", sa.String(length=16), nullable=False),
        sa.Column("analysis_claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("analysis_attempts", sa.Integer(), nullable=False),
        sa.Column("analysed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("trajectory_id", name=op.f("pk_trajectories")),
    )
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.create_index("ix_trajectories_analysis", ["analysis_status", "finalized_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_trajectories_owner"), ["owner"], unique=False)

    op.create_table(
        "trajectory_nodes",
        sa.Column("trajectory_id", sa.Uuid(), nullable=False),
        sa.Column("node_id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("parent_id", sa.Uuid(), nullable=True),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("timestamp_ms", sa.BigInteger(), nullable=False),
        sa.Column("context_snapshot", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False),
        sa.Column("available_actions", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False),
        sa.Column("chosen_action", sa.String(length=200), nullable=False),
        sa.Column("action_params", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False),
        sa.Column("execution_result", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False),
        sa.Column("llm_reasoning", sa.Text(), nullable=True),
        sa.Column("payload_hash", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["trajectory_id"],
            ["trajectories.trajectory_id"],
            name=op.f("fk_trajectory_nodes_trajectory_id_trajectories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("trajectory_id", "node_id", name=op.f("pk_trajectory_nodes")),
    )
    with op.batch_alter_table("trajectory_nodes", schema=None) as batch_op:
        batch_op.create_index("ix_trajectory_nodes_seq", ["trajectory_id", "seq"], unique=False)


def downgrade() -> None:

    with op.batch_alter_table("trajectory_nodes", schema=None) as batch_op:
        batch_op.drop_index("ix_trajectory_nodes_seq")

    op.drop_table("trajectory_nodes")
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_trajectories_owner"))
        batch_op.drop_index("ix_trajectories_analysis")

    op.drop_table("trajectories")
