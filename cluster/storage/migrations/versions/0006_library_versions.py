"""Versioned experience libraries: every template belongs to a numbered version of its owner's library.

Revision ID: 0006_library_versions
Revises: 0005_leases

Existing templates become version 1 of their owner's library, which is also the active version
(source ``live``). Every template is marked "to index" again: the Milvus collection gained a
``version`` field (a new collection, ``experience_library``), which the indexer fills from SQL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_library_versions"
down_revision = "0005_leases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "experience_libraries",
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("note", sa.Text(), server_default="", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", "version", name=op.f("pk_experience_libraries")),
    )
    op.create_table(
        "experience_library_heads",
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("active_version", sa.Integer(), nullable=False),
        sa.Column("previous_version", sa.Integer(), nullable=True),
        sa.Column("switched_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", name=op.f("pk_experience_library_heads")),
    )
    with op.batch_alter_table("experience_templates") as batch:
        batch.add_column(sa.Column("version", sa.Integer(), server_default="1", nullable=False))
        batch.drop_index("ix_experience_templates_owner_signature")
        batch.drop_index("ix_experience_templates_owner_hash")
        batch.create_index(
            "ix_experience_templates_owner_version_signature", ["owner", "version", "signature"], unique=False
        )
        batch.create_index(
            "ix_experience_templates_owner_version_hash", ["owner", "version", "content_hash"], unique=False
        )
    # Each owner's templates so far are version 1, its active version. The created time is the
    # oldest template's, so the list shows when that library began.
    op.execute(
        "INSERT INTO experience_libraries (owner, version, source, note, created_at) "
        "SELECT owner, 1, 'live', '', MIN(created_at) FROM experience_templates GROUP BY owner"
    )
    op.execute(
        "INSERT INTO experience_library_heads (owner, active_version, previous_version, switched_at) "
        "SELECT owner, 1, NULL, MIN(created_at) FROM experience_templates GROUP BY owner"
    )
    op.execute(sa.text("UPDATE experience_templates SET index_pending = :yes").bindparams(yes=True))


def downgrade() -> None:
    # Only the active version survives a downgrade: the older schema knows one library per owner.
    op.execute(
        "DELETE FROM experience_templates WHERE version <> COALESCE("
        "(SELECT h.active_version FROM experience_library_heads h WHERE h.owner = experience_templates.owner), 1)"
    )
    with op.batch_alter_table("experience_templates") as batch:
        batch.drop_index("ix_experience_templates_owner_version_hash")
        batch.drop_index("ix_experience_templates_owner_version_signature")
        batch.create_index("ix_experience_templates_owner_hash", ["owner", "content_hash"], unique=False)
        batch.create_index("ix_experience_templates_owner_signature", ["owner", "signature"], unique=False)
        batch.drop_column("version")
    op.execute(sa.text("UPDATE experience_templates SET index_pending = :yes").bindparams(yes=True))
    op.drop_table("experience_library_heads")
    op.drop_table("experience_libraries")
