"""The attribution actor pool: Ray actors that drain the SQL analysis queue in batches, and the job scheduler.

Each worker owns an :class:`~cluster.analysis.AnalysisService` and loops: claim a batch, attribute
it, learn templates, repeat; it naps for ``poll_interval_s`` when the queue is empty. Workers
coordinate only through the SQL queue, so adding workers needs no other change.

Every worker claims under a name that survives restarts: the pool's (this host and data directory)
and its place in the pool. Ray restarts a worker whose process died, and a service restarted on the
same host and data directory starts the same names, so a worker that starts takes back at once what
its name held: that can only be left from a life that died mid-batch. Two pools on one host with
the same data directory would share names; the service's data-directory lock rules that out.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
import time
from datetime import timedelta
from typing import Any, Protocol

import ray

from cluster.analysis import load_scorer
from cluster.jobs.runs import JobRuns, RunReport
from cluster.serve_config import AttributionConfig, Job, ServeConfig
from cluster.services import Services, analysis_for, build_services
from cluster.settings import Settings
from cluster.trajectories.repository import RunHold

logger = logging.getLogger(__name__)


@ray.remote(max_restarts=-1, max_task_retries=0)
class AttributionWorker:
    """One worker; Ray restarts it if its process dies, and the restarted worker takes its claims back."""

    def __init__(self, settings: Settings, config: AttributionConfig, name: str) -> None:
        self._services = build_services(settings, migrate=False)
        self._analysis = analysis_for(
            self._services,
            history_limit=config.history_limit,
            worker=name,
            lease=timedelta(seconds=config.lease_s),
            run_hold=RunHold(quiet=timedelta(seconds=config.run_quiet_s), longest=timedelta(seconds=config.run_wait_s)),
        )
        self._services.metrics.observe_reclaims("restart", self._analysis.release_own_claims())
        self._poll = config.poll_interval_s
        self._running = False
        self.analysed = 0

    # Retried on the worker Ray starts again after this one's process died: else the new life would
    # sit idle. A worker ended on purpose (ray.kill) is not restarted, so nothing is retried then.
    @ray.method(max_task_retries=-1)
    async def run(self) -> int:
        """Drain the queue until :meth:`stop`; returns how many trajectories this worker analysed."""
        self._running = True
        metrics = self._services.metrics
        while self._running:
            start = time.perf_counter()
            try:
                report = await asyncio.to_thread(self._analysis.run_once)
            except Exception:
                # One bad batch must not stop the worker; its lease lapses and it is retried.
                logger.exception("attribution batch failed")
                metrics.observe_batch_failure()
                await asyncio.sleep(self._poll * 10)
                continue
            # Counted here, in the worker's process: the shared metric files carry it to any replica.
            metrics.observe_batch(time.perf_counter() - start, report.trajectories, report.templates)
            metrics.observe_reclaims("lapsed", report.reclaimed)
            metrics.observe_leases_lost(report.lost)
            self.analysed += report.trajectories
            if report.trajectories == 0:
                await asyncio.sleep(self._poll)
        return self.analysed

    async def stop(self) -> int:
        self._running = False
        return self.analysed

    def ready(self) -> bool:
        """Answers once the constructor has opened the stores (a failed one raises instead)."""
        return True


# How often a scheduler looks again at a job it did not run (not due yet, or another holds it).
JOB_POLL_S = 5.0


class JobRunner(Protocol):
    """One pass of a job under its lease, if due: ``pipelines.jobs.run_job``.

    Handed in by whoever starts the scheduler, because the job kinds are pipelines, above the
    actors: actors never import them.
    """

    def __call__(
        self, runs: JobRuns, settings: Settings, name: str, job: Job, *, services: Services | None, force: bool
    ) -> RunReport | None: ...


@ray.remote(max_restarts=-1, num_cpus=0)
class JobScheduler:
    """Runs each scheduled job when it is due, under the job's lease in SQL (``cluster.jobs.runs``).

    One loop per job, each pass on a thread, so a long consolidation does not hold up memory
    upkeep. Any number of schedulers may run (one per service or workers process): the lease lets
    one of them run a job at a time. Ray restarts a scheduler whose process died; under the same
    name it takes back at once the runs it held, from their watermarks.
    """

    def __init__(self, settings: Settings, jobs: dict[str, Job], holder: str, run_job: JobRunner) -> None:
        self._services = build_services(settings, migrate=False)
        self._settings = settings
        self._jobs = jobs
        self._run_job = run_job
        self._runs = JobRuns(self._services.db, holder)
        self._running = False

    @ray.method(max_task_retries=-1)
    async def run(self) -> None:
        """Run every job on its interval until :meth:`stop`."""
        self._running = True
        await asyncio.gather(*(self._loop(name, job) for name, job in self._jobs.items()))

    async def _loop(self, name: str, job: Job) -> None:
        force = job.run_at_start
        while self._running:
            try:
                report = await asyncio.to_thread(
                    self._run_job, self._runs, self._settings, name, job, services=self._services, force=force
                )
            except Exception:
                # E.g. SQL unreachable while taking the lease: try again at the next look.
                logger.exception("could not schedule job %s", name)
                report = None
            else:
                force = False
            if report is not None:
                # Counted here, in the scheduler's process: the shared metric files carry it to any replica.
                self._services.metrics.observe_job(name, report.duration_s, report.rows, report.error is None)
            await asyncio.sleep(min(job.interval_s, JOB_POLL_S))

    async def stop(self) -> None:
        """Start no new run; a run under way finishes its pass (or, if the actor is ended, resumes later)."""
        self._running = False

    def ready(self) -> bool:
        """Answers once the constructor has opened the stores (a failed one raises instead)."""
        return True


def _options(env: dict[str, str] | None, **options: Any) -> dict[str, Any]:
    if env:
        # E.g. the shared metrics directory: read when the worker's process starts, so it cannot be
        # an argument of the actor.
        options["runtime_env"] = {"env_vars": env}
    return options


def start_scheduler(
    settings: Settings,
    jobs: dict[str, Job],
    env: dict[str, str] | None = None,
    *,
    run_job: JobRunner,
    pool: str | None = None,
) -> Any:
    """Start the job scheduler, already looping; its lease holder name is the pool's (see :func:`pool_name`).

    ``run_job`` runs one pass of a job (``pipelines.jobs.run_job``).
    """
    holder = f"{pool or pool_name(settings)}/scheduler"
    scheduler = JobScheduler.options(**_options(env)).remote(  # type: ignore[attr-defined]
        settings, jobs, holder, run_job
    )
    scheduler.run.remote()
    return scheduler


def pool_name(settings: Settings) -> str:
    """The pool's part of its workers' names: this host and the service's data directory."""
    digest = hashlib.sha256(str(settings.data_dir.resolve()).encode()).hexdigest()[:12]
    return f"{socket.gethostname()}:{digest}"


def start_pool(
    settings: Settings, config: AttributionConfig, env: dict[str, str] | None = None, *, pool: str | None = None
) -> list[Any]:
    """Start ``config.workers`` workers, each already looping; keep the handles to stop them.

    ``env`` is the workers' environment on top of Ray's (see :func:`cluster.metrics.reset_metrics_dir`);
    ``pool`` names the workers' claims (default :func:`pool_name`).
    """
    pool = pool or pool_name(settings)
    workers = [
        AttributionWorker.options(  # type: ignore[attr-defined]
            **_options(env, num_cpus=config.num_cpus, resources=dict(config.resources))
        ).remote(settings, config, f"{pool}/attribution-{index}")
        for index in range(config.workers)
    ]
    for worker in workers:
        worker.run.remote()
    return workers


def start_background(
    settings: Settings, config: ServeConfig, env: dict[str, str] | None = None, *, run_job: JobRunner
) -> list[Any]:
    """Everything that runs beside the MCP endpoint: the attribution pool and the job scheduler,
    which runs each job with ``run_job`` (``pipelines.jobs.run_job``).

    Raises:
        InvalidInput: the ``scorer`` setting names no registered scorer, or one of its
            ``scorer_modules`` cannot be imported; checked here, before any actor starts.
    """
    load_scorer(settings.scorer, settings.scorer_modules)
    workers = start_pool(settings, config.attribution, env)
    jobs = config.scheduled_jobs()
    if jobs:
        workers.append(start_scheduler(settings, jobs, env, run_job=run_job))
    return workers


def wait_ready(workers: list[Any], timeout_s: float) -> None:
    """Return once every worker is constructed.

    Raises:
        ray.exceptions.RayActorError: a constructor failed (e.g. a store cannot be opened).
        ray.exceptions.GetTimeoutError: a worker did not start in ``timeout_s`` (e.g. it asks for
            more CPUs than any node has, so Ray never places it).
    """
    if workers:
        ray.get([w.ready.remote() for w in workers], timeout=timeout_s)


def stop_pool(workers: list[Any], timeout_s: float = 30.0) -> None:
    """Ask every worker to finish its batch, then end the actors; a worker that does not answer is ended anyway."""
    if not workers:
        return
    try:
        ray.get([w.stop.remote() for w in workers], timeout=timeout_s)
    except ray.exceptions.RayError:
        # A worker that died or hangs cannot answer; it is ended below all the same.
        logger.warning("attribution workers did not stop cleanly; ending them")
    finally:
        kill_pool(workers)


def kill_pool(workers: list[Any]) -> None:
    """End the actors at once: for workers that may never have started, which cannot be asked to stop."""
    for worker in workers:
        ray.kill(worker)
