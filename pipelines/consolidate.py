"""The consolidation job: rebuild each owner's library from everything stored, keep it only if it serves no worse.

For each owner with trajectories finalized since the job's watermark:

1. **Rebuild.** :func:`pipelines.reprocess.reprocess` attributes every stored trajectory of the
   owner again (grouped by role and task type, on a Ray Data actor pool) and builds a new,
   inactive library version from the templates found (source ``consolidate``).
2. **Judge** on the owner's newest trajectories (the ``holdout`` share, split by time as
   ``hindsight evaluate`` splits), serving every held-out decision with
   :func:`pipelines.evaluate.evaluate_library`, which never serves a template whose provenance
   names the trajectory being judged. The new version learned from the held-out trajectories
   too, so what is judged for it is the library its pipeline learns from the older ones only
   (:func:`rebuild`: the same groups, scorer and merge, in this process); the active version is
   judged as stored. Neither is scored with a trajectory's own evidence; the active version loses
   the templates that merged a held-out trajectory's evidence, so the comparison leans towards
   the new version when live learning has analysed the held-out trajectories.
3. **Decide.** The new version is promoted if its hit@1 is at least the active one's; otherwise,
   or when no held-out decision has an action known to succeed, the active version stays. The
   decision and its reason go into the run's result; a kept version stays listed for
   ``hindsight library diff`` and ``promote``.
4. **Checkpoint** the owner's newest finalize time as its watermark: a run that dies after this
   owner starts again at the next one, and an owner with nothing new is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from actors.engine import attribute_batch, merge_into_library
from actors.engine.retire import ActionOutcome
from cluster.core.errors import Conflict
from cluster.core.types import Frozen
from cluster.experience.models import LibrarySource
from cluster.experience.repository import SqlExperienceStore
from cluster.experience.service import ExperienceService
from cluster.experience.templates import ExperienceTemplate
from cluster.experience.versions import LibraryVersions
from cluster.jobs.runs import JobContext, JobOutcome
from cluster.serve_config import ConsolidateParameters
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.trajectories.models import Trajectory
from cluster.trajectories.repository import SqlTrajectoryStore
from pipelines.evaluate import Metrics, evaluate_library, split_by_time
from pipelines.evaluate_job import load_trajectories
from pipelines.reprocess import reprocess

logger = logging.getLogger(__name__)


class Decision(Frozen):
    """What consolidation did with one owner's new version, and why."""

    owner: str
    active_version: int
    new_version: int
    templates: int = Field(ge=0, description="Templates in the new version.")
    judged: int = Field(ge=0, description="Held-out decisions with an action known to succeed.")
    active_hit_at_1: float | None
    new_hit_at_1: float | None
    promoted: bool
    reason: str


def decide(active: Metrics, new: Metrics) -> tuple[bool, str]:
    """Promote when the new version's hit@1 is not below the active one's, on the same decisions."""
    if new.judged == 0 or new.hit_at_1 is None or active.hit_at_1 is None:
        return False, "no held-out decision with an action known to succeed: nothing to compare"
    if new.hit_at_1 >= active.hit_at_1:
        return True, f"hit@1 {new.hit_at_1:.2f} ≥ {active.hit_at_1:.2f} on {new.judged} decisions"
    return False, f"hit@1 {new.hit_at_1:.2f} < {active.hit_at_1:.2f} on {new.judged} decisions"


def rebuild(trajectories: Sequence[Trajectory], scorer: str, group_size: int = 200) -> list[ExperienceTemplate]:
    """The library :func:`pipelines.reprocess.reprocess` and ``create_version`` build from ``trajectories``:
    groups of one role and task type (at most ``group_size`` each) attributed together, then merged."""
    groups: dict[tuple[str, str | None], list[Trajectory]] = {}
    by_run: dict[tuple[str, str], list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault((t.header.role, t.header.task_type), []).append(t)
        if t.header.run_id is not None:
            by_run.setdefault((t.owner, t.header.run_id), []).append(t)
    found: list[ExperienceTemplate] = []
    outcomes: list[ActionOutcome] = []
    for _key, group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        for start in range(0, len(group), group_size):
            batch = group[start : start + group_size]
            # Only the batch's own runs: blame is decided within a run, and handing every
            # trajectory to every batch made the rebuild quadratic in the owner's history.
            runs = dict.fromkeys((t.owner, t.header.run_id) for t in batch if t.header.run_id is not None)
            members = [m for run in runs for m in by_run[run]]
            results = attribute_batch(batch, scorer=scorer, run_members=members)
            found.extend(t for r in results for t in r.templates)
            outcomes.extend(o for r in results for o in r.outcomes)
    return list(merge_into_library([], found, outcomes).library)


def judge(
    db: Database,
    settings: Settings,
    owner: str,
    new_version: int,
    parameters: ConsolidateParameters,
) -> Decision:
    """Score the active version and the new version's pipeline on the owner's held-out trajectories; promote
    the new version if it is not worse."""
    split = split_by_time(load_trajectories(settings, owner).get(owner, []), parameters.holdout)
    with db.read() as session:
        store = SqlExperienceStore(session)
        active = store.active_version(owner)
        stored = _library(store, owner, active)
        templates = store.count(owner, new_version)
    judged = {"active": stored, "new": rebuild(split.train, parameters.scorer)}
    metrics = {
        which: Metrics.of(
            evaluate_library(
                library, split.test, top_k=settings.experience_top_k, min_confidence=settings.confidence_threshold
            )
        )
        for which, library in judged.items()
    }
    promote, reason = decide(metrics["active"], metrics["new"])
    if promote:
        try:
            LibraryVersions(db).promote(owner, new_version)
        except Conflict as exc:
            promote, reason = False, f"{reason}, but not promoted: {exc}"
    return Decision(
        owner=owner,
        active_version=active,
        new_version=new_version,
        templates=templates,
        judged=metrics["new"].judged,
        active_hit_at_1=metrics["active"].hit_at_1,
        new_hit_at_1=metrics["new"].hit_at_1,
        promoted=promote,
        reason=reason,
    )


def _library(store: SqlExperienceStore, owner: str, version: int) -> list[ExperienceTemplate]:
    return [template for template, _ in store.iter_owner(owner, version=version)]


def consolidate(
    settings: Settings,
    parameters: ConsolidateParameters,
    context: JobContext,
    *,
    output_dir: Path,
    experience: ExperienceService | None = None,
) -> JobOutcome:
    """One consolidation pass over every owner with something new since the watermark.

    ``experience`` builds the versions (the scheduler passes its own); default one on the
    settings' stores, as :func:`pipelines.reprocess.reprocess` opens it.
    """
    seen: dict[str, str] = dict((context.watermark or {}).get("owners", {}))
    db = Database(settings.sql_url())
    try:
        with db.read() as session:
            newest = SqlTrajectoryStore(session).newest_finalized()
        decisions: dict[str, Any] = {}
        rows = templates = 0
        for owner, finalized in sorted(newest.items()):
            mark = finalized.isoformat()
            if seen.get(owner) == mark:
                continue  # nothing finalized since this owner's last consolidation
            context.progress(f"{owner}: re-attributing every stored trajectory")
            summary = reprocess(
                settings,
                output_dir,
                scorer=parameters.scorer,
                owner=owner,
                actors=parameters.actors,
                num_cpus=parameters.num_cpus,
                new_version=True,
                experience=experience,
                source=LibrarySource.CONSOLIDATE,
                note=f"job {context.name}, scorer {parameters.scorer}",
            )
            rows += summary.trajectories
            version = summary.versions.get(owner)
            if version is not None:
                context.progress(f"{owner}: judging v{version} against the active version")
                decision = judge(db, settings, owner, version, parameters)
                templates += decision.templates
                decisions[owner] = decision.model_dump(mode="json")
                logger.info("consolidated %s into v%d: %s", owner, version, decision.reason)
            seen[owner] = mark
            context.checkpoint({"owners": seen})
    finally:
        db.dispose()
    brief = "; ".join(
        f"{owner} {'promoted' if d['promoted'] else 'kept'} v{d['new_version']}" for owner, d in decisions.items()
    )
    result = {"rows": rows, "templates": templates, "decision": brief or "nothing new", "owners": decisions}
    return JobOutcome(result, {"owners": seen})
