"""Which embedder built each vector collection, kept in SQL.

Vectors made by one embedder are not comparable with queries embedded by another (a different
model, or the same model in other arithmetic). Milvus Lite keeps no collection properties, so the
record lives beside the data it derives from: each process checks it at start and warns when its
own embedder differs (the cure is ``hindsight reindex --what all``), and a full rebuild records
the embedder that made it.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import String, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from cluster.core.types import utcnow
from cluster.storage.db import Base, Database, UtcDateTime

logger = logging.getLogger(__name__)


class VectorBuildRow(Base):
    """The embedder whose vectors a Milvus collection holds."""

    __tablename__ = "vector_builds"

    collection: Mapped[str] = mapped_column(String(200), primary_key=True)
    embedder: Mapped[str] = mapped_column(String(500))
    recorded_at: Mapped[datetime] = mapped_column(UtcDateTime)


def check_vector_build(db: Database, collection: str, embedder: str) -> str | None:
    """The embedder that built ``collection`` if it is not ``embedder`` (with a warning), else None.

    A collection without a record is taken to be this embedder's and recorded (a first start, or a
    deployment from before the record existed).
    """
    try:
        with db.transaction() as session:
            row = session.get(VectorBuildRow, collection)
            if row is None:
                session.add(VectorBuildRow(collection=collection, embedder=embedder, recorded_at=utcnow()))
                return None
            built = row.embedder
    except IntegrityError:
        # Another process starting at the same moment recorded it first: compare with that.
        return check_vector_build(db, collection, embedder)
    if built == embedder:
        return None
    logger.warning(
        "the %s vectors were built by %r, but this process embeds with %r: search quality suffers until "
        "`hindsight reindex --what all` rebuilds them",
        collection,
        built,
        embedder,
    )
    return built


def record_vector_build(db: Database, collection: str, embedder: str) -> None:
    """After a full rebuild of ``collection``: its vectors are ``embedder``'s."""
    with db.transaction() as session:
        row = session.get(VectorBuildRow, collection)
        if row is None:
            session.add(VectorBuildRow(collection=collection, embedder=embedder, recorded_at=utcnow()))
        else:
            row.embedder, row.recorded_at = embedder, utcnow()


def vector_builds(db: Database) -> dict[str, str]:
    """Every recorded collection and the embedder that built it."""
    with db.read() as session:
        return dict(session.execute(select(VectorBuildRow.collection, VectorBuildRow.embedder)).all())
