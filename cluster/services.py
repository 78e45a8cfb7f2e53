"""The composition root: build every service of one process from :class:`Settings`."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cluster.capture import CaptureService
from cluster.metrics import Metrics
from cluster.settings import Settings
from cluster.stores.db import Database
from cluster.stores.migrate import upgrade
from cluster.stores.trajectories import SqlTrajectoryStore, TrajectoryLimits

logger = logging.getLogger(__name__)


@dataclass
class Services:
    settings: Settings
    db: Database
    capture: CaptureService
    metrics: Metrics = field(default_factory=Metrics)

    def health(self) -> dict[str, bool]:
        """Readiness of every store this process depends on."""
        return {"sql": self.db.ping()}

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
    services = Services(settings=settings, db=db, capture=CaptureService(db, limits_of(settings)))
    services.metrics.on_scrape(services.refresh_queue_metrics)
    return services
