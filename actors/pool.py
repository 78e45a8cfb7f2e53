"""The attribution actor pool: Ray actors that drain the SQL analysis queue in batches.

Each worker owns an :class:`~cluster.analysis.AnalysisService` and loops: claim a batch, attribute
it, learn templates, repeat; it naps for ``poll_interval_s`` when the queue is empty. Workers
coordinate only through the SQL queue, so adding workers needs no other change.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import ray

from cluster.memory.maintenance import run_maintenance
from cluster.serve_config import AttributionConfig, MaintenanceConfig, ServeConfig
from cluster.services import analysis_for, build_services
from cluster.settings import Settings

logger = logging.getLogger(__name__)


@ray.remote(max_restarts=-1, max_task_retries=0)
class AttributionWorker:
    """One worker; Ray restarts it if its process dies, and the queue lease covers the lost batch."""

    def __init__(self, settings: Settings, config: AttributionConfig) -> None:
        self._services = build_services(settings, migrate=False)
        self._analysis = analysis_for(self._services, batch_size=config.batch_size, history_limit=config.history_limit)
        self._poll = config.poll_interval_s
        self._running = False
        self.analysed = 0

    async def run(self) -> int:
        """Drain the queue until :meth:`stop`; returns how many trajectories this worker analysed."""
        self._running = True
        while self._running:
            try:
                report = await asyncio.to_thread(self._analysis.run_once)
            except Exception:
                # One bad batch must not stop the worker; its lease expires and it is retried.
                logger.exception("attribution batch failed")
                await asyncio.sleep(self._poll * 10)
                continue
            self.analysed += report.trajectories
            if report.trajectories == 0:
                await asyncio.sleep(self._poll)
        return self.analysed

    async def stop(self) -> int:
        self._running = False
        return self.analysed


@ray.remote(max_restarts=-1, num_cpus=0)
class MaintenanceWorker:
    """Runs memory maintenance every ``interval_s``; a failed pass is logged and retried next time."""

    def __init__(self, settings: Settings, config: MaintenanceConfig) -> None:
        self._services = build_services(settings, migrate=False)
        self._interval = config.interval_s
        self._running = False

    async def run(self) -> None:
        self._running = True
        while self._running:
            try:
                await asyncio.to_thread(run_maintenance, self._services.memory)
            except Exception:
                logger.exception("memory maintenance failed")
            await asyncio.sleep(self._interval)

    async def stop(self) -> None:
        self._running = False


def start_maintenance(settings: Settings, config: MaintenanceConfig) -> Any:
    worker = MaintenanceWorker.remote(settings, config)  # type: ignore[attr-defined]
    worker.run.remote()
    return worker


def start_pool(settings: Settings, config: AttributionConfig) -> list[Any]:
    """Start ``config.workers`` workers, each already looping; keep the handles to stop them."""
    workers = [
        AttributionWorker.options(num_cpus=config.num_cpus).remote(settings, config)  # type: ignore[attr-defined]
        for _ in range(config.workers)
    ]
    for worker in workers:
        worker.run.remote()
    return workers


def start_background(settings: Settings, config: ServeConfig) -> list[Any]:
    """Everything that runs beside the MCP endpoint: the attribution pool and memory maintenance."""
    workers = start_pool(settings, config.attribution)
    if config.maintenance.enabled:
        workers.append(start_maintenance(settings, config.maintenance))
    return workers


def stop_pool(workers: list[Any], timeout_s: float = 30.0) -> None:
    if workers:
        ray.get([w.stop.remote() for w in workers], timeout=timeout_s)
        for worker in workers:
            ray.kill(worker)
