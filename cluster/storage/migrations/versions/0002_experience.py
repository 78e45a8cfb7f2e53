"""experience library: templates, confidence history, served outcomes

Revision ID: 0002_experience
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_experience"
down_revision = "0001"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "experience_templates",
        sa.Column("template_id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=200), nullable=False),
        sa.Column("task_type", sa.String(length=200), nullable=True),
        sa.Column("signature", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("parent_id", sa.Uuid(), nullable=True),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("model", JSON, nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("template_id", name=op.f("pk_experience_templates")),
    )
    with op.batch_alter_table("experience_templates", schema=None) as batch_op:
        batch_op.create_index("ix_experience_templates_owner_role", ["owner", "role"], unique=False)
        batch_op.create_index("ix_experience_templates_owner_signature", ["owner", "signature"], unique=False)
        batch_op.create_index("ix_experience_templates_owner_hash", ["owner", "content_hash"], unique=False)

    op.create_table(
        "experience_confidence_history",
        sa.Column("change_id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("template_id", sa.Uuid(), nullable=False),
        sa.Column("before", sa.Float(), nullable=True),
        sa.Column("after", sa.Float(), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=False),
        sa.Column("trajectory_id", sa.Uuid(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["template_id"],
            ["experience_templates.template_id"],
            name=op.f("fk_experience_confidence_history_template_id_experience_templates"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("change_id", name=op.f("pk_experience_confidence_history")),
    )
    with op.batch_alter_table("experience_confidence_history", schema=None) as batch_op:
        batch_op.create_index(
            "ix_experience_confidence_history_template", ["owner", "template_id", "seq"], unique=False
        )

    op.create_table(
        "experience_outcomes",
        sa.Column("template_id", sa.Uuid(), nullable=False),
        sa.Column("trajectory_id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("succeeded", sa.Boolean(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["template_id"],
            ["experience_templates.template_id"],
            name=op.f("fk_experience_outcomes_template_id_experience_templates"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("template_id", "trajectory_id", name=op.f("pk_experience_outcomes")),
    )


def downgrade() -> None:
    op.drop_table("experience_outcomes")
    with op.batch_alter_table("experience_confidence_history", schema=None) as batch_op:
        batch_op.drop_index("ix_experience_confidence_history_template")
    op.drop_table("experience_confidence_history")
    with op.batch_alter_table("experience_templates", schema=None) as batch_op:
        batch_op.drop_index("ix_experience_templates_owner_hash")
        batch_op.drop_index("ix_experience_templates_owner_signature")
        batch_op.drop_index("ix_experience_templates_owner_role")
    op.drop_table("experience_templates")
