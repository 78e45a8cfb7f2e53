"""The consolidation job: rebuild each owner's library from everything stored, keep it only if it serves no worse.

For each owner with trajectories finalized since the job's watermark:

1. **Rebuild.** :func:`pipelines.reprocess.reprocess` attributes every stored trajectory of the
   owner again (grouped by role and task type, on a Ray Data actor pool) and builds a new,
   inactive library version from the templates found (source ``consolidate``). Each rebuilt
   template keeps the outcomes agents reported about the active template it replaces
   (:func:`cluster.experience.versions.keep_reported`): the trajectories hold the evidence, not
   that feedback.
2. **Judge** on the owner's newest trajectories (the ``holdout`` share, split by time as
   ``hindsight evaluate`` splits), serving every held-out decision with
   :func:`pipelines.evaluate.evaluate_library`, which never serves a template whose provenance
   names the trajectory being judged. The new version learned from the held-out trajectories
   too, so what is judged for it is the library its pipeline learns from the older ones only
   (:func:`rebuild`: the same groups, scorer and merge, in this process, and the same reported
   outcomes taken along); the active version is judged as stored. Neither is scored with a
   trajectory's own evidence; the active version loses the templates that merged a held-out
   trajectory's evidence, so the comparison leans towards the new version when live learning has
   analysed the held-out trajectories.
3. **Decide.** The new version is promoted if its hit@1 is at least the active one's; otherwise,
   or when no held-out decision has an action known to succeed, the active version stays. The
   decision and its reason go into the run's result; a kept version stays listed for
   ``hindsight library diff`` and ``promote``.
4. **Checkpoint** the owner's newest finalize time as its watermark: a run that dies after this
   owner starts again at the next one, and an owner with nothing new is skipped.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field

from actors.engine import attribute_batch, merge_into_library
from actors.engine.model.templates import ExperienceTemplate
from actors.engine.model.trajectories import Trajectory
from actors.engine.retire import ActionOutcome
from cluster.analysis import load_scorer
from cluster.core.errors import Conflict
from cluster.core.types import Frozen
from cluster.experience.models import LibrarySource, RoleLibraries
from cluster.experience.repository import SqlExperienceStore
from cluster.experience.roles import pooled_roles
from cluster.experience.service import ExperienceService
from cluster.experience.versions import LibraryVersions, keep_reported
from cluster.jobs.runs import JobContext, JobOutcome
from cluster.serve_config import ConsolidateParameters
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.trajectories.repository import FinalizedEntry, SqlTrajectoryStore
from pipelines.evaluate import DecisionResult, Metrics, evaluate_library, held_out_count, time_order
from pipelines.reprocess import reprocess

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_M = TypeVar("_M")
_K = TypeVar("_K")


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


def _decided(owner: str, decision: dict[str, Any]) -> str:
    """One owner's decision in a few words: which version serves now."""
    if decision["promoted"]:
        return f"{owner} promoted v{decision['new_version']}"
    return f"{owner} kept v{decision['active_version']} active (v{decision['new_version']} built, not promoted)"


def decide(active: Metrics, new: Metrics) -> tuple[bool, str]:
    """Promote when the new version's hit@1 is not below the active one's, on the same decisions."""
    if new.judged == 0 or new.hit_at_1 is None or active.hit_at_1 is None:
        return False, "no held-out decision with an action known to succeed: nothing to compare"
    if new.hit_at_1 >= active.hit_at_1:
        return True, f"hit@1 {new.hit_at_1:.2f} ≥ {active.hit_at_1:.2f} on {new.judged} decisions"
    return False, f"hit@1 {new.hit_at_1:.2f} < {active.hit_at_1:.2f} on {new.judged} decisions"


Batch = tuple[int, Sequence[Trajectory], Sequence[Trajectory]]
"""A batch's place in the rebuild's order, its trajectories, and the members of their runs (for blame)."""

# The most stored trajectories rebuild_stored keeps read at once (a few batches with their runs).
CACHED_TRAJECTORIES = 2000


def rebuild(trajectories: Sequence[Trajectory], scorer: str, group_size: int = 200) -> list[ExperienceTemplate]:
    """The library :func:`pipelines.reprocess.reprocess` and ``create_version`` build from ``trajectories``:
    groups of one role and task type (at most ``group_size`` each) attributed together, then merged."""
    groups: dict[tuple[str, str | None], list[Trajectory]] = {}
    by_run: dict[tuple[str, str], list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault((t.header.role, t.header.task_type), []).append(t)
        if t.header.run_id is not None:
            by_run.setdefault((t.owner, t.header.run_id), []).append(t)

    def run_of(t: Trajectory) -> tuple[str, str] | None:
        return None if t.header.run_id is None else (t.owner, t.header.run_id)

    batches = (
        (i, chunk, _members(chunk, by_run, run_of)) for i, (_, _, chunk) in enumerate(_chunks(groups, group_size))
    )
    return attribute_batches(batches, scorer)


def attribute_batches(batches: Iterable[Batch], scorer: str) -> list[ExperienceTemplate]:
    """Attribute each batch with its runs' members (in any order), then merge every template found
    with the pooled outcomes in the batches' own order: merging depends on the order."""
    found: dict[int, tuple[list[ExperienceTemplate], list[ActionOutcome]]] = {}
    for place, batch, members in batches:
        results = attribute_batch(batch, scorer=scorer, run_members=members)
        found[place] = ([t for r in results for t in r.templates], [o for r in results for o in r.outcomes])
    ordered = [found[place] for place in sorted(found)]
    templates = [t for ts, _ in ordered for t in ts]
    outcomes = [o for _, os in ordered for o in os]
    return list(merge_into_library([], templates, outcomes).library)


def rebuild_stored(
    db: Database,
    owner: str,
    train: Sequence[FinalizedEntry],
    roles: RoleLibraries,
    scorer: str,
    group_size: int = 200,
) -> list[ExperienceTemplate]:
    """:func:`rebuild` of the stored trajectories ``train`` names, read from SQL as batches need them:
    the same library, in memory bounded by a few batches and their runs whatever the owner's history.

    A batch needs its runs' other roles, which are other groups' batches: the batches are attributed
    in the order of their task type and place in time, roles side by side, so the runs one batch
    reads are mostly the next batches' own, and a trajectory is dropped once no batch still needs it.
    """
    groups: dict[tuple[str, str | None], list[FinalizedEntry]] = {}
    by_run: dict[str, list[uuid.UUID]] = {}
    for e in train:
        groups.setdefault((e.role, e.task_type), []).append(e)
        if e.run_id is not None:
            by_run.setdefault(e.run_id, []).append(e.trajectory_id)
    planned = []
    uses: Counter[uuid.UUID] = Counter()
    for place, ((role, task_type), position, chunk) in enumerate(_chunks(groups, group_size)):
        # Members include the batch's own trajectories (as in rebuild).
        members = _members(chunk, by_run, lambda e: e.run_id)
        needed = list(dict.fromkeys([*(e.trajectory_id for e in chunk), *members]))
        uses.update(needed)
        planned.append(((task_type or "", position, role), place, chunk, members, needed))
    cache: dict[uuid.UUID, Trajectory] = {}

    def batches() -> Iterator[Batch]:
        for _, place, chunk, members, needed in sorted(planned, key=lambda p: p[0]):
            missing = [i for i in needed if i not in cache]
            if len(cache) + len(missing) > CACHED_TRAJECTORIES:
                cache.clear()  # read again when needed: a bound on memory, not on correctness
                missing = needed
            cache.update(_load(db, owner, roles, missing))
            yield (
                place,
                [cache[e.trajectory_id] for e in chunk if e.trajectory_id in cache],
                [cache[m] for m in members if m in cache],
            )
            for i in needed:
                uses[i] -= 1
                if uses[i] == 0:
                    cache.pop(i, None)

    return attribute_batches(batches(), scorer)


def _chunks(
    groups: dict[tuple[str, str | None], list[_T]], size: int
) -> Iterator[tuple[tuple[str, str | None], int, list[_T]]]:
    """Each group's batches (its key, the batch's place in the group, its items), groups sorted by key."""
    for key, group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        for position, start in enumerate(range(0, len(group), size)):
            yield key, position, group[start : start + size]


def _members(chunk: Sequence[_T], by_run: Mapping[_K, list[_M]], run_of: Callable[[_T], _K | None]) -> list[_M]:
    # Only the batch's own runs: blame is decided within a run, and handing every trajectory to
    # every batch made the rebuild quadratic in the owner's history.
    runs = dict.fromkeys(run for run in map(run_of, chunk) if run is not None)
    return [m for run in runs for m in by_run[run]]


def _load(db: Database, owner: str, roles: RoleLibraries, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Trajectory]:
    with db.read() as session:
        loaded = SqlTrajectoryStore(session).load_many(owner, list(dict.fromkeys(ids)))
    return {t.trajectory_id: t for t in pooled_roles(loaded, roles)}


def evaluate_stored(
    db: Database,
    owner: str,
    test: Sequence[FinalizedEntry],
    roles: RoleLibraries,
    libraries: Mapping[str, Sequence[ExperienceTemplate]],
    *,
    top_k: int,
    min_confidence: float,
    page: int = 500,
) -> dict[str, Metrics]:
    """:func:`pipelines.evaluate.evaluate_library` of each library on the stored trajectories ``test``
    names, read a page at a time."""
    results: dict[str, list[DecisionResult]] = {name: [] for name in libraries}
    for start in range(0, len(test), page):
        ids = [e.trajectory_id for e in test[start : start + page]]
        by_id = _load(db, owner, roles, ids)
        trajectories = [by_id[i] for i in ids if i in by_id]
        for name, library in libraries.items():
            results[name].extend(evaluate_library(library, trajectories, top_k=top_k, min_confidence=min_confidence))
    return {name: Metrics.of(found) for name, found in results.items()}


def split_stored(
    db: Database, owner: str, roles: RoleLibraries, holdout: float
) -> tuple[list[FinalizedEntry], list[FinalizedEntry]]:
    """The owner's finalized trajectories split by time as :func:`pipelines.evaluate.split_by_time`
    splits them (older, held out), without reading their nodes."""
    with db.read() as session:
        entries = SqlTrajectoryStore(session).finalized_entries(owner, roles)
    entries.sort(key=lambda e: time_order(e.finalized_at, e.created_at, e.trajectory_id))
    cut = len(entries) - held_out_count(len(entries), holdout)
    return entries[:cut], entries[cut:]


def judge(
    db: Database,
    settings: Settings,
    owner: str,
    new_version: int,
    parameters: ConsolidateParameters,
) -> Decision:
    """Score the active version and the new version's pipeline on the owner's held-out trajectories; promote
    the new version if it is not worse."""
    # Trajectories are read a batch (or a page) at a time: the judge holds no owner's whole history.
    roles = settings.role_libraries()
    train, test = split_stored(db, owner, roles, parameters.holdout)
    with db.read() as session:
        store = SqlExperienceStore(session)
        active = store.active_version(owner)
        stored = _library(store, owner, active)
        templates = store.count(owner, new_version)
    # As create_version builds it: the rebuilt rules with the outcomes agents reported about the active ones.
    rebuilt = keep_reported(rebuild_stored(db, owner, train, roles, settings.scorer), stored)
    judged = {"active": stored, "new": rebuilt}
    metrics = evaluate_stored(
        db,
        owner,
        test,
        roles,
        judged,
        top_k=settings.experience_top_k,
        min_confidence=settings.confidence_threshold,
    )
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
    # Learns with the scorer setting, as the live workers do; its modules are imported here too,
    # where the judge rebuilds the new version's library.
    load_scorer(settings.scorer, settings.scorer_modules)
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
                scorer=settings.scorer,
                scorer_modules=settings.scorer_modules,
                owner=owner,
                actors=parameters.actors,
                num_cpus=parameters.num_cpus,
                new_version=True,
                experience=experience,
                source=LibrarySource.CONSOLIDATE,
                note=f"job {context.name}, scorer {settings.scorer}",
            )
            rows += summary.trajectories
            version = summary.versions.get(owner)
            if version is not None:
                context.progress(f"{owner}: judging v{version} against the active version")
                decision = judge(db, settings, owner, version, parameters)
                if decision.promoted and experience is not None:
                    # The switch gave some templates outcomes reported while the version was judged:
                    # their vectors' confidence now, not at the workers' next index sweep.
                    experience.index_pending(owner)
                templates += decision.templates
                decisions[owner] = decision.model_dump(mode="json")
                logger.info("consolidated %s into v%d: %s", owner, version, decision.reason)
            seen[owner] = mark
            context.checkpoint({"owners": seen})
    finally:
        db.dispose()
    brief = "; ".join(_decided(owner, d) for owner, d in decisions.items())
    result = {"rows": rows, "templates": templates, "decision": brief or "nothing new", "owners": decisions}
    return JobOutcome(result, {"owners": seen})
