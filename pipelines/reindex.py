"""Ray Data job: rebuild the experience vectors in Milvus from SQL, embedding on a pool of actors.

``ExperienceService.reindex`` embeds every template in one process, one batch after another; this
job spreads the embedding (nearly all of the cost) over an actor pool:

1. Before anything is read, the job notes which ids Milvus holds for each owner. Vectors of
   templates created while the job runs are then never mistaken for stale ones.
2. **Read**: one Ray task per owner reads the owner's templates from SQL in keyset pages
   (``SqlExperienceStore.iter_versions``, every library version, oldest first) and streams each page out as a block, so
   neither the driver nor a task holds a whole library.
3. **Embed and upsert**: ``map_batches(EmbedAndUpsert, compute=ActorPoolStrategy(size=n))``. Each
   actor owns one embedder (one intra-op thread: two threads on two busy cores were 10x slower),
   one Milvus client connected by URI and one SQL engine. Per batch it embeds the stored
   embedding texts, upserts ``IndexRow``\\ s through :class:`~cluster.experience.index.MilvusExperienceIndex`
   and clears the "to index" marks of exactly those versions (a row changed since keeps its mark).
4. **Stale**: the driver deletes the ids noted in step 1 that SQL no longer has (read after the
   run, never inferred from what the run returned: a run that lost pages must not delete live
   vectors).
5. **Check**: per owner, every template SQL holds must have exactly one vector. A template without
   one, or a key held twice, fails the job with :class:`ReindexIncomplete` (its summary says how
   many of each): a rerun upserts everything again.

Guarantees: upserts are idempotent, so a retried batch or a rerun is harmless; the collection is
never dropped, so queries keep working during a rebuild (they re-check every candidate in SQL).
A run over every owner also visits the owners only Milvus still has (no template left in SQL, a
vector's delete lost): step 4 deletes their vectors.

Milvus Lite: one process owns a ``.db`` file. If the target is a Lite file that nobody serves,
this job serves it (a :class:`~cluster.storage.milvus.MilvusLiteServer`) for its duration and the
actors connect to that URI; if the service already serves it, the actors connect to the service's.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import resource
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray
import ray.data

from actors.engine.model.templates import ExperienceTemplate
from cluster.core.errors import HindsightError, InvalidInput
from cluster.embedding import build_embedder, embedder_identity
from cluster.experience.index import MilvusExperienceIndex
from cluster.experience.ports import IndexRow
from cluster.experience.repository import SqlExperienceStore
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.milvus import MilvusLiteServer, is_lite_target, lite_path, open_milvus, served_uri
from cluster.storage.vector_builds import record_vector_build

logger = logging.getLogger(__name__)

Batch = dict[str, np.ndarray]


def read_owner_pages(batch: Batch, database_url: str, page_size: int) -> Iterator[Batch]:
    """Ray Data UDF: the templates of each owner in ``batch``, one output block per SQL page."""
    db = Database(database_url)
    try:
        for owner in batch["owner"]:
            owner = str(owner)
            page: list[tuple[ExperienceTemplate, str, int]] = []
            with db.read() as session:
                for item in SqlExperienceStore(session).iter_versions(owner, page_size):
                    page.append(item)
                    if len(page) == page_size:
                        yield _page(owner, page)
                        page = []
            if page:
                yield _page(owner, page)
    finally:
        db.dispose()


def _page(owner: str, page: list[tuple[ExperienceTemplate, str, int]]) -> Batch:
    return {
        "owner": np.array([owner] * len(page), dtype=object),
        "template": np.array([t.model_dump_json() for t, _, _ in page], dtype=object),
        "text": np.array([text for _, text, _ in page], dtype=object),
        "version": np.array([version for _, _, version in page], dtype=np.int64),
    }


class EmbedAndUpsert:
    """Ray Data UDF: one embedder, one Milvus client and one SQL engine per actor.

    Args:
        settings: the job's settings (embedding model, SQL URL).
        milvus_uri: a served URI, never a Lite file: the file has one owner, the driver's side.
    """

    def __init__(self, settings: Settings, milvus_uri: str) -> None:
        embedding = settings.embedding.model_copy(update={"threads": 1})
        # No cache: every text is embedded once.
        self._embedder = build_embedder(embedding, cache_size=0)
        token = settings.milvus_token.get_secret_value() if settings.milvus_token else None
        self._client = open_milvus(milvus_uri, token)
        self._index = MilvusExperienceIndex(self._client, dimension=self._embedder.dimension)
        self._db = Database(settings.sql_url())

    def __call__(self, batch: Batch) -> Batch:
        templates = [ExperienceTemplate.model_validate_json(str(t)) for t in batch["template"]]
        owners = [str(o) for o in batch["owner"]]
        vectors = self._embedder.embed([str(t) for t in batch["text"]])
        versions = [int(v) for v in batch["version"]]
        self._index.upsert(
            [
                IndexRow.of(o, t, v, version=version)
                for t, o, v, version in zip(templates, owners, vectors, versions, strict=True)
            ]
        )
        by_owner: dict[str, list[ExperienceTemplate]] = {}
        for t, owner in zip(templates, owners, strict=True):
            by_owner.setdefault(owner, []).append(t)
        # After the upsert, never inside a transaction that waits on Milvus.
        with self._db.transaction() as session:
            store = SqlExperienceStore(session)
            for owner, items in by_owner.items():
                store.mark_indexed(owner, items)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        return {
            "owner": np.array(owners, dtype=object),
            "template_id": np.array([str(t.template_id) for t in templates], dtype=object),
            "peak_rss_mb": np.full(len(templates), peak_mb),
        }


@dataclass(frozen=True)
class ReindexSummary:
    """What one run did.

    Attributes:
        written: vectors upserted, by owner.
        stale_removed: vectors deleted because their template is gone from SQL, by owner.
        seconds: wall time of the whole job.
        actor_peak_rss_mb: the largest peak resident set of any embedding actor.
    """

    written: dict[str, int] = field(default_factory=dict)
    stale_removed: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    actor_peak_rss_mb: float = 0.0
    missing: dict[str, int] = field(default_factory=dict)
    """Templates in SQL without a vector after the run, by owner (only owners with some)."""
    duplicates: dict[str, int] = field(default_factory=dict)
    """Vectors beyond one per key after the run, by owner (only owners with some)."""

    @property
    def total(self) -> int:
        return sum(self.written.values())


class ReindexIncomplete(HindsightError):
    """The run ended with templates that have no vector, or keys held twice; a rerun repairs it."""

    def __init__(self, summary: ReindexSummary) -> None:
        super().__init__(
            f"reindex incomplete: templates without a vector {summary.missing}, "
            f"duplicate vectors {summary.duplicates}; run it again"
        )
        self.summary = summary


@contextlib.contextmanager
def served_milvus(settings: Settings) -> Iterator[str]:
    """The URI the actors connect to: the target itself if it is a server, the URI a live owner
    serves a Lite file on, or else a server this process starts on the file for the duration."""
    target = settings.milvus_target()
    if not is_lite_target(target):
        yield target
        return
    uri = served_uri(lite_path(target))
    if uri is not None:
        yield uri
        return
    with MilvusLiteServer(target) as server:
        yield server.uri


def reindex(
    settings: Settings,
    *,
    owner: str | None = None,
    actors: int = 2,
    batch_size: int = 256,
    page_size: int = 2000,
) -> ReindexSummary:
    """Rebuild the Milvus vectors of one owner's (or every owner's) templates from SQL.

    Args:
        settings: where SQL and Milvus are, and the embedding model.
        owner: one owner; default every owner with templates.
        actors: size of the embedding actor pool.
        batch_size: templates embedded and upserted per actor call.
        page_size: templates per SQL page (and per block leaving a read task).

    Raises:
        InvalidInput: ``actors``, ``batch_size`` or ``page_size`` below 1.
        StoreUnavailable: SQL or Milvus cannot be reached, or the Lite file is owned by a
            process that does not serve it.
        ReindexIncomplete: after the run a template has no vector or a key is held twice.
    """
    if min(actors, batch_size, page_size) < 1:
        raise InvalidInput("actors, batch_size and page_size must be at least 1")
    started = time.perf_counter()
    db = Database(settings.sql_url())
    try:
        with db.read() as session:
            owners = [owner] if owner is not None else SqlExperienceStore(session).owners()
    finally:
        db.dispose()
    with served_milvus(settings) as uri:
        with _driver_index(settings, uri) as index:
            index.ensure_collection()
            if owner is None:
                # Owners only Milvus still has too (their last template gone, a vector's delete
                # lost): they have nothing to read, and the stale step below deletes their vectors.
                owners = sorted({*owners, *index.owners()})
            # Noted before SQL is read: a template created meanwhile is indexed by its writer, and
            # never counts as stale here.
            before = {o: index.ids(o) for o in owners}
        written: dict[str, int] = dict.fromkeys(owners, 0)
        peak = 0.0
        if owners:
            for row in _dataset(settings, uri, owners, actors, batch_size, page_size).iter_rows():
                row_owner = str(row["owner"])
                written[row_owner] += 1
                peak = max(peak, float(row["peak_rss_mb"]))
        stale: dict[str, int] = {}
        missing: dict[str, int] = {}
        duplicates: dict[str, int] = {}
        db = Database(settings.sql_url())
        try:
            with _driver_index(settings, uri) as index:
                for o in owners:
                    with db.read() as session:
                        stored = SqlExperienceStore(session).template_ids(o)
                    gone = sorted(before[o] - stored)
                    index.delete(o, gone)
                    stale[o] = len(gone)
                    lost, extra = check_index(index, o, stored)
                    if lost:
                        missing[o] = lost
                    if extra:
                        duplicates[o] = extra
                if owner is None and not missing and not duplicates:
                    # Every template's vector is this embedder's now.
                    record_vector_build(db, index.collection, embedder_identity(settings.embedding))
        finally:
            db.dispose()
    summary = ReindexSummary(
        written, stale, round(time.perf_counter() - started, 3), round(peak, 1), missing, duplicates
    )
    logger.info(
        "reindexed %d templates of %d owners on %d actors in %.1fs (%d stale removed)",
        summary.total,
        len(owners),
        actors,
        summary.seconds,
        sum(stale.values()),
    )
    if missing or duplicates:
        raise ReindexIncomplete(summary)
    return summary


def check_index(index: MilvusExperienceIndex, owner: str, stored: set[uuid.UUID]) -> tuple[int, int]:
    """``(templates of stored without a vector, vectors beyond one per key)`` for ``owner``."""
    held = index.ids(owner)
    return len(stored - held), index.count(owner) - len(held)


@contextlib.contextmanager
def _driver_index(settings: Settings, uri: str) -> Iterator[MilvusExperienceIndex]:
    """The driver's index on a connection of its own, closed on exit.

    Not pymilvus's shared connection: that one outlives ``close()``, and idling through a job of
    minutes its keepalive pings earn a GOAWAY ("too_many_pings") from the server, after which
    reconnecting failed (seen twice with 10k templates on 2 actors). A dedicated connection is
    really closed, and the stale phase opens a fresh one.
    """
    token = settings.milvus_token.get_secret_value() if settings.milvus_token else None
    client = open_milvus(uri, token, dedicated=True)
    try:
        yield MilvusExperienceIndex(client, dimension=settings.embedding.dimension)
    finally:
        client.close()


def _dataset(
    settings: Settings, uri: str, owners: list[str], actors: int, batch_size: int, page_size: int
) -> ray.data.Dataset:
    read = ray.data.from_items([{"owner": o} for o in owners], override_num_blocks=len(owners)).map_batches(
        functools.partial(read_owner_pages, database_url=settings.sql_url(), page_size=page_size),
        batch_size=1,
        # Reading waits on SQL, not the CPU; asking for none keeps a pool that fills every core
        # from starving its own input.
        num_cpus=0,
    )
    kwargs: dict[str, Any] = {"settings": settings, "milvus_uri": uri}
    return read.map_batches(
        EmbedAndUpsert,
        fn_constructor_kwargs=kwargs,
        batch_size=batch_size,
        compute=ray.data.ActorPoolStrategy(size=actors),
    )
