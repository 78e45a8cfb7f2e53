"""Which embedder built each vector collection, kept in SQL.

Vectors made by one embedder are not comparable with queries embedded by another (a different
model, or the same model in other arithmetic). Milvus Lite keeps no collection properties, so the
record lives beside the data it derives from: each process checks it at start and warns when its
own embedder differs (the cure is ``hindsight reindex --what all``), and a full rebuild records
the embedder that made it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
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


def check_vector_builds(db: Database, collections: Sequence[str], embedder: str) -> dict[str, str]:
    """The collections another embedder built (collection -> that embedder), each with a warning.

    One read when every collection has a record. A collection without one is taken to be this
    embedder's and recorded (a first start, or a deployment from before the record existed).
    """
    built = vector_builds(db)
    missing = [c for c in collections if c not in built]
    if missing:
        try:
            with db.transaction() as session:
                session.add_all(VectorBuildRow(collection=c, embedder=embedder, recorded_at=utcnow()) for c in missing)
        except IntegrityError:
            # Another process starting at the same moment recorded them first: compare with that.
            return check_vector_builds(db, collections, embedder)
    stale = {c: built[c] for c in collections if c in built and built[c] != embedder}
    for collection, other in stale.items():
        logger.warning(
            "the %s vectors were built by %r, but this process embeds with %r: search quality suffers until "
            "`hindsight reindex --what all` rebuilds them",
            collection,
            other,
            embedder,
        )
    return stale


def record_vector_build(db: Database, collection: str, embedder: str) -> None:
    """After a full rebuild of ``collection``: its vectors are ``embedder``'s."""
    with db.transaction() as session:
        session.merge(VectorBuildRow(collection=collection, embedder=embedder, recorded_at=utcnow()))


def vector_builds(db: Database) -> dict[str, str]:
    """Every recorded collection and the embedder that built it."""
    with db.read() as session:
        return dict(session.execute(select(VectorBuildRow.collection, VectorBuildRow.embedder)).all())
