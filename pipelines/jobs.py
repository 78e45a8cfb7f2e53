"""The kinds of scheduled job and how one pass of each runs: ``maintenance``, ``reindex``, ``consolidate``.

Each kind is a function of the job's config and its run's :class:`~cluster.jobs.runs.JobContext`
that returns a :class:`~cluster.jobs.runs.JobOutcome`; :func:`run_job` runs one under the job's
lease. The scheduler actor (``actors.pool``, handed this function by whoever starts it) and
``hindsight jobs run`` both come through here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from cluster.jobs.runs import JobContext, JobOutcome, JobRuns, RunReport
from cluster.memory.maintenance import run_maintenance
from cluster.serve_config import Job, MaintenanceJob, ReindexJob, Vectors
from cluster.services import Services, build_services
from cluster.settings import Settings
from pipelines.consolidate import consolidate
from pipelines.reindex import reindex

logger = logging.getLogger(__name__)


def run_job(
    runs: JobRuns,
    settings: Settings,
    name: str,
    job: Job,
    *,
    services: Services | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
) -> RunReport | None:
    """Run job ``name`` once if it is due (or ``force``) and no other scheduler holds it.

    ``services``: the caller's own (the scheduler's); without them a kind opens what it needs for
    the run and closes it after (a Lite file someone serves is reached through their URI).
    """

    def work(context: JobContext) -> JobOutcome:
        return run_kind(settings, name, job, context, services)

    return runs.run(
        name,
        job.kind,
        work,
        interval=timedelta(seconds=job.interval_s),
        lease=timedelta(seconds=job.lease_s),
        force=force,
        progress=progress,
    )


def run_kind(settings: Settings, name: str, job: Job, context: JobContext, services: Services | None) -> JobOutcome:
    """One pass of ``job``'s kind, without the lease (see :func:`run_job`)."""
    if isinstance(job, MaintenanceJob):
        with _services(settings, services) as own:
            summary = run_maintenance(own.memory)
        changed = summary.promoted + summary.archived + summary.purged + summary.indexed
        return JobOutcome({"rows": changed, **summary.model_dump()})
    if isinstance(job, ReindexJob):
        # Idempotent upserts: a run taking over a dead one simply rebuilds again, no watermark needed.
        p = job.parameters
        result: dict[str, Any] = {"rows": 0}
        if p.what is not Vectors.MEMORIES:
            context.progress("re-embedding every template into Milvus")
            done = reindex(settings, owner=p.owner, actors=p.actors, batch_size=p.batch_size)
            stale = sum(done.stale_removed.values())
            result.update(rows=done.total, written=done.written, stale_removed=stale)
        if p.what is not Vectors.TEMPLATES:
            context.progress("re-embedding every memory into Milvus")
            with _services(settings, services) as own:
                memories = own.memory.reindex(p.owner, batch_size=p.batch_size)
            result.update(rows=result["rows"] + memories, memories=memories)
        return JobOutcome(result)
    return consolidate(
        settings,
        job.parameters,
        context,
        output_dir=settings.data_dir / "jobs" / name,
        experience=None if services is None else services.experience,
    )


@contextmanager
def _services(settings: Settings, given: Services | None) -> Iterator[Services]:
    if given is not None:
        yield given
        return
    own = build_services(settings, migrate=False)
    try:
        yield own
    finally:
        own.close()
