"""The composition root: build every service of one process from :class:`Settings`."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cluster.capture import CaptureService
from cluster.embedding import build_embedder
from cluster.experience.service import ExperienceService, build_experience_service
from cluster.memory.factory import build_memory_service
from cluster.memory.service import MemoryService
from cluster.metrics import Metrics
from cluster.settings import Settings
from cluster.stores.db import Database
from cluster.stores.migrate import upgrade
from cluster.stores.milvus import connect
from cluster.stores.trajectories import SqlTrajectoryStore, TrajectoryLimits

logger = logging.getLogger(__name__)


@dataclass
class Services:
    settings: Settings
    db: Database
    capture: CaptureService
    experience: ExperienceService
    memory: MemoryService
    milvus: Any
    metrics: Metrics = field(default_factory=Metrics)

    def health(self) -> dict[str, bool]:
        """Readiness of every store this process depends on."""
        return {"sql": self.db.ping(), "milvus": self._milvus_ok()}

    def _milvus_ok(self) -> bool:
        try:
            self.milvus.list_collections()
        except Exception:
            return False
        return True

    def refresh_cache_metrics(self) -> None:
        self.metrics.cache_hits.set(self.memory.cache.hits)
        self.metrics.cache_misses.set(self.memory.cache.misses)

    def refresh_queue_metrics(self) -> None:
        with self.db.transaction() as session:
            store = SqlTrajectoryStore(session)
            depth = store.queue_depth()
            oldest = store.oldest_pending_at()
        self.metrics.queue_depth.set(depth)
        if oldest is not None and oldest.tzinfo is None:
            oldest = oldest.replace(tzinfo=UTC)
        self.metrics.queue_lag.set((datetime.now(UTC) - oldest).total_seconds() if oldest else 0.0)

    def close(self) -> None:
        self.milvus.close()
        self.db.dispose()


def limits_of(settings: Settings) -> TrajectoryLimits:
    return TrajectoryLimits(
        max_trajectory_nodes=settings.max_trajectory_nodes, max_context_bytes=settings.max_context_bytes
    )


def build_services(settings: Settings, *, migrate: bool = True) -> Services:
    """Open the stores the settings name (creating the embedded files and schema when asked)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.sql_url()
    if migrate:
        upgrade(url)
    db = Database(url)
    # One embedder and one Milvus client per process, shared by both libraries.
    embedder = build_embedder(settings.embedding)
    milvus = connect(settings)
    services = Services(
        settings=settings,
        db=db,
        capture=CaptureService(db, limits_of(settings)),
        experience=build_experience_service(settings, db, embedder=embedder, client=milvus),
        memory=build_memory_service(settings, database=db, embedder=embedder, milvus=milvus),
        milvus=milvus,
    )
    services.metrics.on_scrape(services.refresh_queue_metrics)
    services.metrics.on_scrape(services.refresh_cache_metrics)
    return services
