"""Memory upkeep off the agents' path: delayed promotion, activity decay and archiving, TTL purge,
and vector work a Milvus failure left queued.

``hindsight serve`` runs it on a Ray actor every ``maintenance.interval_s`` (deploy/serve.yaml);
``hindsight maintain`` runs it once (cron, a Kubernetes CronJob).
"""

from __future__ import annotations

import logging
from datetime import datetime

from pydantic import Field

from cluster.core.types import Frozen
from cluster.memory.service import MemoryService

logger = logging.getLogger(__name__)


class MaintenanceSummary(Frozen):
    promoted: int = Field(ge=0, description="Logged turns promoted into long-term memory.")
    archived: int = Field(ge=0, description="Memories whose activity decayed below the threshold.")
    purged: int = Field(ge=0, description="Expired memories deleted from SQL and Milvus.")
    indexed: int = Field(default=0, ge=0, description="Queued vector changes applied to Milvus.")


class MaintenanceIncomplete(RuntimeError):
    """Some owners' turns could not be re-evaluated; every other owner and step was done."""


def run_maintenance(memory: MemoryService, now: datetime | None = None) -> MaintenanceSummary:
    """One pass over every owner; each step is owner by owner inside the memory service.

    Raises :class:`MaintenanceIncomplete` after the whole pass when an owner's re-evaluation failed,
    so that the run counts as failed (``hindsight_job_runs{outcome="error"}``) and the next retries it.
    """
    promoted = memory.reevaluate(now=now)
    archived = memory.decay_and_archive(now)  # writes the accesses queries recorded first
    purged = memory.purge_expired(now)
    indexed = memory.sync_index()
    summary = MaintenanceSummary(
        promoted=promoted.changed, archived=archived.changed, purged=purged.changed, indexed=indexed
    )
    logger.info("memory maintenance: %s", summary)
    if promoted.failed_owners:
        named = ", ".join(repr(o) for o in promoted.failed_owners[:5])
        raise MaintenanceIncomplete(
            f"re-evaluation failed for {len(promoted.failed_owners)} owner(s) ({named}); their turns stay "
            f"pending and the log has the error; every other owner and step ran: {summary}"
        )
    return summary
