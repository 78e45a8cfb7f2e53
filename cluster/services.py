"""The composition root: build every service of one process from :class:`Settings`."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from threadpoolctl import threadpool_limits

from actors.engine.model.trajectories import TrajectoryLimits
from cluster.analysis import AnalysisService, load_scorer
from cluster.core.ports import Embedder
from cluster.embedding import build_embedder, embedder_identity, uncached
from cluster.experience.index import DEFAULT_COLLECTION as EXPERIENCE_COLLECTION
from cluster.experience.index import MilvusExperienceIndex
from cluster.experience.repository import SqlExperienceStore
from cluster.experience.service import ExperienceService
from cluster.jobs.repository import SqlJobStore
from cluster.memory.index import COLLECTION, MilvusMemoryIndex
from cluster.memory.policy import ActivityPolicy, MemoryLimits, PromotionPolicy, RankingPolicy
from cluster.memory.service import MemoryService
from cluster.metrics import CounterFold, JobSample, Metrics, QueueState
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.files import private_dir
from cluster.storage.migrate import upgrade
from cluster.storage.milvus import open_milvus
from cluster.storage.vector_builds import check_vector_builds, vector_builds
from cluster.trajectories.capture import CaptureService
from cluster.trajectories.repository import DEFAULT_LEASE, RunHold, SqlTrajectoryStore

logger = logging.getLogger(__name__)

#: The Milvus collections whose builder is recorded in SQL (``vector_builds``).
VECTOR_COLLECTIONS = (COLLECTION, EXPERIENCE_COLLECTION)


@dataclass
class Services:
    settings: Settings
    db: Database
    capture: CaptureService
    experience: ExperienceService
    memory: MemoryService
    milvus: Any
    metrics: Metrics = field(default_factory=Metrics)
    _cache_folds: tuple[CounterFold, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        # The metrics read the queue from SQL at scrape time, and take the cache's own counts after
        # each tool call, so that a scrape of any replica includes this one's.
        cache = self.memory.cache
        self._cache_folds = (
            CounterFold(self.metrics.cache_hits, lambda: cache.hits),
            CounterFold(self.metrics.cache_misses, lambda: cache.misses),
        )
        self.metrics.watch_queue(self.queue_state)
        self.metrics.watch_jobs(self.job_samples)
        self.metrics.watch_vectors(self.vector_state)
        self.metrics.on_sync(self.refresh_cache_metrics)

    def health(self) -> dict[str, bool]:
        """Readiness of every store this process depends on."""
        return {"sql": self.db.ping(), "milvus": self._milvus_ok()}

    def _milvus_ok(self) -> bool:
        try:
            self.milvus.list_collections()
        except Exception:
            return False
        return True

    def queue_state(self) -> QueueState:
        """The attribution queue for ``/metrics``: read from SQL, so every replica reports the same."""
        with self.db.read() as session:
            store = SqlTrajectoryStore(session)
            depth = store.queue_depth()
            oldest = store.oldest_pending_at()
        lag = (datetime.now(UTC) - oldest).total_seconds() if oldest else 0.0
        return QueueState(depth=depth, lag_seconds=max(lag, 0.0))

    def stale_vectors(self) -> dict[str, str]:
        """Collections whose vectors another embedder built (collection -> that embedder).

        Read from SQL, so a rebuild by any process (``hindsight reindex``) clears it for every one.
        """
        mine = embedder_identity(self.settings.embedding)
        return {c: e for c, e in vector_builds(self.db).items() if c in VECTOR_COLLECTIONS and e != mine}

    def vector_state(self) -> dict[str, bool]:
        """For ``/metrics``: each collection and whether another embedder built it."""
        stale = self.stale_vectors()
        return {c: c in stale for c in VECTOR_COLLECTIONS}

    def job_samples(self) -> list[JobSample]:
        """The scheduled jobs' last runs for ``/metrics``, from SQL like the queue."""
        return job_samples(self.db)

    def refresh_cache_metrics(self) -> None:
        """Fold this process's memory cache hits and misses into the shared counters."""
        for fold in self._cache_folds:
            fold()

    def close(self) -> None:
        self.memory.flush_accesses()  # what queries recorded since the last write or maintenance pass
        if self.memory.words is not None:
            self.memory.words.wait()  # word vectors embedded for expansion, still to be written
        self.milvus.close()
        self.db.dispose()


def job_samples(db: Database) -> list[JobSample]:
    """Every scheduled job's last run as SQL records it: right whichever scheduler ran it."""
    with db.read() as session:
        states = SqlJobStore(session).states()
    return [
        JobSample(
            name=s.name,
            last_success=None if s.last_success_at is None else s.last_success_at.timestamp(),
            duration_s=s.duration_s,
            rows=_rows(s.result) if s.last_success_at is not None else None,
        )
        for s in states
    ]


def _rows(result: dict[str, Any] | None) -> int | None:
    rows = (result or {}).get("rows")
    return rows if isinstance(rows, int) else None


def limits_of(settings: Settings) -> TrajectoryLimits:
    return TrajectoryLimits(
        max_trajectory_nodes=settings.max_trajectory_nodes,
        max_context_bytes=settings.max_context_bytes,
        max_node_field_bytes=settings.max_node_field_bytes,
        max_query_bytes=settings.max_query_bytes,
    )


def build_services(settings: Settings, *, migrate: bool = True) -> Services:
    """Open the stores the settings name (creating the embedded files and schema when asked).

    For a service process (a replica, a worker, the stdio server, a CLI command): it also keeps
    numpy's BLAS on one thread for the whole process.
    """
    # A service process serves many calls at once, beside the embedder's and Milvus' threads: a
    # BLAS call fanned out to every core only makes its threads wait on busy cores (a 100k-memory
    # query's word search took 5 ms instead of 0.1; docs/benchmarks.md).
    threadpool_limits(limits=1, user_api="blas")
    private_dir(settings.data_dir)
    url = settings.sql_url()
    if migrate:
        upgrade(url)
    db = Database(url)
    # One embedder and one Milvus client per process, shared by both libraries.
    embedder = build_embedder(settings.embedding)
    milvus = milvus_client(settings)
    services = Services(
        settings=settings,
        db=db,
        capture=CaptureService(db, limits_of(settings), experiences=SqlExperienceStore),
        experience=build_experience_service(settings, db, embedder=embedder, client=milvus),
        memory=build_memory_service(settings, database=db, embedder=embedder, milvus=milvus),
        milvus=milvus,
    )
    try:
        check_vector_builds(db, VECTOR_COLLECTIONS, embedder_identity(settings.embedding))
    except SQLAlchemyError as exc:
        # A check that cannot run (a schema not migrated yet) must not keep a process from serving.
        logger.warning("could not check which embedder built the vectors: %s", exc)
    return services


def milvus_client(settings: Settings, *, timeout: float = 30.0) -> Any:
    """A client for ``settings.milvus_target()`` with ``settings.milvus_token``."""
    token = settings.milvus_token.get_secret_value() if settings.milvus_token else None
    return open_milvus(settings.milvus_target(), token, timeout=timeout)


def build_experience_service(
    settings: Settings, db: Database, *, embedder: Embedder | None = None, client: Any = None
) -> ExperienceService:
    """The service the settings describe: embedder from ``settings.embedding``, Milvus from
    ``settings.milvus_target()`` (see ``cluster.storage.milvus`` for who may open a Lite file),
    ``experience_top_k`` and ``confidence_threshold`` as defaults. Pass ``embedder``/``client`` to share them.
    """
    embedder = embedder or build_embedder(settings.embedding)
    index = MilvusExperienceIndex(client or milvus_client(settings), dimension=embedder.dimension)
    return ExperienceService(
        db,
        index,
        embedder,
        top_k=settings.experience_top_k,
        confidence_threshold=settings.confidence_threshold,
        versions_kept=settings.experience_versions_kept,
        roles=settings.role_libraries(),
        value_nearness=settings.value_nearness,
    )


def build_memory_service(
    settings: Settings,
    *,
    database: Database | None = None,
    embedder: Embedder | None = None,
    milvus: Any = None,
    collection: str = COLLECTION,
    index_type: str | None = None,
    activity: ActivityPolicy | None = None,
    ranking: RankingPolicy | None = None,
    promotion: PromotionPolicy | None = None,
    cache_bytes: int | None = None,
    cache_ttl: timedelta | None = None,
) -> MemoryService:
    """A memory service on the configured SQL database, Milvus and embedder.

    Pass ``database``, ``embedder`` or ``milvus`` (a ``MilvusClient``) to share ones the caller
    already opened (an ``embedder`` must be the one ``settings.embedding`` describes: expansion's
    word vectors are stored under that identity); a process must not open a Milvus Lite file twice.
    The SQL schema must be migrated (``cluster.storage.migrate.upgrade``). Policies default to the
    ones documented on :class:`ActivityPolicy`, :class:`RankingPolicy` and :class:`PromotionPolicy`;
    every tuning argument left out comes from ``settings.memory``.
    """
    tuning = settings.memory
    embedder = embedder or build_embedder(settings.embedding)
    index = MilvusMemoryIndex(
        milvus or milvus_client(settings),
        dimension=embedder.dimension,
        collection=collection,
        index_type=index_type or tuning.index_type,
    )
    return MemoryService(
        database or Database(settings.sql_url()),
        embedder,
        index,
        activity=activity or tuning.activity,
        ranking=ranking or tuning.ranking,
        promotion=promotion or tuning.promotion,
        limits=MemoryLimits(
            max_value_bytes=tuning.max_value_bytes,
            max_metadata_bytes=tuning.max_metadata_bytes,
            max_context_bytes=tuning.max_context_bytes,
        ),
        cache_bytes=tuning.cache_bytes if cache_bytes is None else cache_bytes,
        embedder_name=embedder_identity(settings.embedding),
        word_embedder=uncached(embedder),
        cache_ttl=cache_ttl or timedelta(seconds=tuning.cache_ttl_seconds),
        access_flush_entries=tuning.access_flush_entries,
        access_flush_interval=timedelta(seconds=tuning.access_flush_seconds),
    )


def analysis_for(
    services: Services,
    *,
    history_limit: int = 200,
    worker: str | None = None,
    lease: timedelta | None = None,
    run_hold: RunHold | None = None,
) -> AnalysisService:
    """The analysis of one process's services, with the settings' ``scorer`` (its ``scorer_modules``
    imported first) and ``analysis_batch_size``.

    ``worker`` names its claims (default: this host and process); ``lease`` is how long a claim
    outlives its last heartbeat; ``run_hold`` how long a multi-agent run's trajectories wait for
    the rest of their run.

    Raises:
        InvalidInput: the scorer is not registered, or a scorer module cannot be imported.
    """
    settings = services.settings
    load_scorer(settings.scorer, settings.scorer_modules)
    return AnalysisService(
        services.db,
        services.experience,
        batch_size=settings.analysis_batch_size,
        history_limit=history_limit,
        worker=worker,
        lease=lease or DEFAULT_LEASE,
        scorer=settings.scorer,
        run_hold=run_hold,
        roles=settings.role_libraries(),
    )
