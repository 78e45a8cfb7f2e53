"""Template vectors in Milvus, written after the SQL commit that marked them, and rebuilt from SQL.

A write commits its rows to SQL with a "to index" mark; :meth:`Indexing.index_pending` embeds and
upserts the marked versions afterwards, outside any write transaction, and clears the marks. If
Milvus fails the marks stay and a later call retries: nothing committed is lost.
:meth:`Indexing.reindex` rebuilds an owner's rows (or every owner's) from SQL.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime

from actors.engine.model.templates import ExperienceTemplate
from cluster.core.errors import StoreUnavailable
from cluster.core.ports import Embedder
from cluster.experience.ownership import check_owner
from cluster.experience.ports import ExperienceIndex, IndexRow
from cluster.experience.repository import SqlExperienceStore
from cluster.storage.db import Database

logger = logging.getLogger(__name__)


class Indexing:
    """Keeps the experience index in step with SQL.

    Args:
        db: the SQL database (source of truth).
        index: the vector index the rows are written to.
        embedder: turns template texts into unit vectors.
    """

    def __init__(self, db: Database, index: ExperienceIndex, embedder: Embedder) -> None:
        self.db = db
        self.index = index
        self.embedder = embedder

    def index_pending(self, owner: str | None = None, batch_size: int = 256) -> int:
        """Write the vectors of every template version marked "to index" (one owner's, or all).

        Runs after the commit that marked them, outside any write transaction. If Milvus fails the
        marks stay and a later call (the next write, or the attribution workers' sweep) retries:
        nothing committed is lost. Returns how many vectors were written.
        """
        written = 0
        seen: set[tuple[uuid.UUID, datetime]] = set()
        while True:
            with self.db.read() as session:
                backlog = SqlExperienceStore(session).index_backlog(owner, batch_size)
            versions = {(t.template_id, t.updated_at) for _, t, _, _ in backlog}
            if not backlog or versions <= seen:
                return written
            seen |= versions
            try:
                by_owner: dict[str, list[tuple[ExperienceTemplate, str, int]]] = {}
                for row_owner, template, body, version in backlog:
                    by_owner.setdefault(row_owner, []).append((template, body, version))
                for row_owner, items in by_owner.items():
                    self._index(row_owner, items)
            except StoreUnavailable as exc:
                logger.warning("experience index is behind SQL (%d marked); will retry: %s", len(backlog), exc)
                return written
            with self.db.transaction() as session:
                store = SqlExperienceStore(session)
                for row_owner, items in by_owner.items():
                    store.mark_indexed(row_owner, [t for t, _, _ in items])
            written += len(backlog)
            if len(backlog) < batch_size:
                return written

    def reindex(self, owner: str | None = None, batch_size: int = 512) -> int:
        """Rebuild the Milvus rows of one owner (or of every owner) from SQL; returns rows written.

        Online, as the ``reindex`` job: rows are upserted over the old ones and templates no longer in
        SQL are removed afterwards, so the library stays findable throughout. Every owner means SQL's
        and Milvus' (one whose last template is gone may still have vectors).
        """
        if owner is not None:
            return self._reindex_owner(check_owner(owner), batch_size)
        self.index.ensure_collection()
        with self.db.transaction() as session:
            owners = set(SqlExperienceStore(session).owners())
        return sum(self._reindex_owner(o, batch_size) for o in sorted(owners | self.index.owners()))

    def _reindex_owner(self, owner: str, batch_size: int) -> int:
        # Noted before SQL is read: a template created meanwhile is indexed by its writer.
        stale = self.index.ids(owner)
        written = 0
        with self.db.read() as session:
            items = list(SqlExperienceStore(session).iter_versions(owner, batch_size))
        for offset in range(0, len(items), batch_size):
            batch = items[offset : offset + batch_size]
            self._index(owner, batch)
            with self.db.transaction() as session:
                SqlExperienceStore(session).mark_indexed(owner, [t for t, _, _ in batch])
            written += len(batch)
            stale.difference_update(t.template_id for t, _, _ in batch)
        self.index.delete(owner, sorted(stale))
        logger.info("reindexed %d templates of %s (%d stale removed)", written, owner, len(stale))
        return written

    def _index(self, owner: str, items: Sequence[tuple[ExperienceTemplate, str, int]]) -> None:
        """Embed and upsert ``(template, text, library version)`` items of one owner."""
        if not items:
            return
        vectors = self.embedder.embed([body for _, body, _ in items])
        self.index.upsert(
            [IndexRow.of(owner, t, v, version=version) for (t, _, version), v in zip(items, vectors, strict=True)]
        )
