"""Ray Data job: re-run attribution over every stored trajectory, e.g. with a new scorer.

Trajectories are grouped by (owner, role, task type) — the evidence one attribution batch may
contrast; the other roles of their multi-agent runs are read beside them, to follow hand-offs — and
each group is attributed by a pool of actors running the same :func:`actors.engine.attribute_batch`
the live service uses. The templates found are written as an
experience library file per owner (the JSON Lines export format), to compare or import, and with
``new_version`` also as a new library version per owner beside the active one: not served until
``hindsight library promote`` (see docs/jobs.md, "Library versions").

Results are taken in the groups' order, whichever actor finishes first, so the library is the same
for any pool size.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import ray
import ray.data

from actors.engine import attribute_batch
from actors.engine.model.templates import ExperienceTemplate
from actors.engine.retire import ActionOutcome
from cluster.analysis import load_scorer
from cluster.experience.exchange import export_lines
from cluster.experience.models import LibrarySource, RoleLibraries
from cluster.experience.roles import pooled_roles
from cluster.experience.service import ExperienceService
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.trajectories.repository import SqlTrajectoryStore

logger = logging.getLogger(__name__)


class AttributeGroups:
    """Ray Data UDF: one SQL connection per actor; each row of a batch is one trajectory group."""

    def __init__(
        self,
        database_url: str,
        scorer: str,
        scorer_modules: list[str],
        with_outcomes: bool,
        shared_roles: dict[str, tuple[str, ...]],
    ) -> None:
        # A user's scorer registers itself on import; each actor process imports it anew.
        load_scorer(scorer, scorer_modules)
        self._db = Database(database_url)
        self._scorer = scorer
        # The pooled outcomes only matter to a new version (create_version); otherwise not shipped.
        self._with_outcomes = with_outcomes
        self._roles = RoleLibraries(shared=shared_roles)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        indexes: list[int] = []
        owners: list[str] = []
        trajectories: list[int] = []
        templates: list[str] = []
        outcomes: list[str] = []
        for index, owner, ids_json in zip(batch["group"], batch["owner"], batch["trajectory_ids"], strict=True):
            ids = [uuid.UUID(i) for i in json.loads(ids_json)]
            with self._db.transaction() as session:
                store = SqlTrajectoryStore(session)
                group = pooled_roles(store.load_many(str(owner), ids), self._roles)
                # The other roles of the group's runs: their failures are charged to earlier hand-offs.
                run_ids = [t.header.run_id for t in group if t.header.run_id is not None]
                members = store.run_members(str(owner), run_ids, ids)
            results = attribute_batch(group, scorer=self._scorer, run_members=members)
            found = [t.model_dump(mode="json") for r in results for t in r.templates]
            indexes.append(int(index))
            owners.append(str(owner))
            trajectories.append(len(group))
            templates.append(json.dumps(found))
            pooled = [o.model_dump(mode="json") for r in results for o in r.outcomes] if self._with_outcomes else []
            outcomes.append(json.dumps(pooled))
        return {
            "group": np.array(indexes),
            "owner": np.array(owners, dtype=object),
            "trajectories": np.array(trajectories),
            "templates": np.array(templates, dtype=object),
            "outcomes": np.array(outcomes, dtype=object),
        }


@dataclass(frozen=True)
class ReprocessSummary:
    groups: int
    trajectories: int
    templates_by_owner: dict[str, int]
    outputs: list[Path]
    versions: dict[str, int] = field(default_factory=dict)
    """The library version built for each owner (``new_version``)."""


def reprocess(
    settings: Settings,
    output_dir: Path,
    *,
    scorer: str | None = None,
    scorer_modules: Sequence[str] | None = None,
    owner: str | None = None,
    group_size: int = 200,
    actors: int = 2,
    new_version: bool = False,
    experience: ExperienceService | None = None,
    source: LibrarySource = LibrarySource.REPROCESS,
    note: str | None = None,
    num_cpus: float | None = None,
) -> ReprocessSummary:
    """Attribute every finalized trajectory again and write one library file per owner.

    Args:
        settings: where the trajectories are (``database_url``).
        output_dir: receives ``<owner>.jsonl`` files.
        scorer: a registered scorer name (see :func:`actors.engine.register_scorer`); default the
            ``scorer`` setting, the live workers' scorer.
        scorer_modules: modules to import in every actor first, where user scorers register;
            default the ``scorer_modules`` setting.
        owner: restrict to one owner; default all.
        group_size: the most trajectories contrasted in one batch.
        actors: size of the Ray Data actor pool.
        new_version: also build a new, inactive library version per owner from the templates found.
        experience: the service to build versions with; default one on the settings' stores
            (a Lite file another process owns is reached through the URI it serves).
        source: what the new versions say made them (``reprocess``, or ``consolidate`` for the job).
        note: shown by ``library list``; default ``scorer S``.
        num_cpus: CPUs each actor asks Ray for (default Ray Data's); less than one lets the pool
            share a node with the service.

    Raises:
        InvalidInput: the scorer is not registered or a module cannot be imported (checked before
            anything is read).
    """
    scorer = scorer or settings.scorer
    modules = list(settings.scorer_modules if scorer_modules is None else scorer_modules)
    load_scorer(scorer, modules)
    db = Database(settings.sql_url())
    with db.transaction() as session:
        # Roles sharing a library (the shared_roles setting) are one group: their evidence pools.
        groups = SqlTrajectoryStore(session).finalized_groups(owner, settings.role_libraries())
    db.dispose()
    rows: list[dict[str, Any]] = []
    for (group_owner, _role, _task_type), ids in groups.items():
        for start in range(0, len(ids), group_size):
            chunk = [str(i) for i in ids[start : start + group_size]]
            rows.append({"group": len(rows), "owner": group_owner, "trajectory_ids": json.dumps(chunk)})
    if not rows:
        return ReprocessSummary(0, 0, {}, [])
    resources: dict[str, Any] = {} if num_cpus is None else {"num_cpus": num_cpus}
    dataset = ray.data.from_items(rows).map_batches(
        AttributeGroups,
        fn_constructor_kwargs={
            "database_url": settings.sql_url(),
            "scorer": scorer,
            "scorer_modules": modules,
            "with_outcomes": new_version,
            "shared_roles": settings.role_libraries().shared,
        },
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=max(1, min(actors, len(rows)))),
        **resources,
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    per_owner: dict[str, list[dict[str, Any]]] = {}
    evidence: dict[str, list[ActionOutcome]] = {}
    total = 0
    # The pool hands groups back as they finish, and merging near-duplicates depends on the order
    # templates arrive in: taken in the groups' own order, the library does not depend on the
    # number of actors or on which finished first (the plain loop's library, in any run).
    for row in sorted(dataset.iter_rows(), key=lambda r: int(r["group"])):
        total += int(row["trajectories"])
        per_owner.setdefault(str(row["owner"]), []).extend(json.loads(row["templates"]))
        pooled = [ActionOutcome.model_validate(o) for o in json.loads(row["outcomes"])]
        evidence.setdefault(str(row["owner"]), []).extend(pooled)
    outputs = []
    for name, found in sorted(per_owner.items()):
        path = output_dir / f"{name}.jsonl"
        # The experience exchange format (docs/experience-format.md): import_library reads it.
        lines = export_lines(found, {"count": len(found), "scorer": scorer})
        path.write_text("\n".join(lines) + "\n")
        outputs.append(path)
    counts = Counter({name: len(found) for name, found in per_owner.items()})
    logger.info("reprocessed %d trajectories in %d groups with scorer %s", total, len(rows), scorer)
    versions: dict[str, int] = {}
    if new_version:
        with _experience(settings, experience) as service:
            for name, found in sorted(per_owner.items()):
                templates = [ExperienceTemplate.model_validate(t) for t in found]
                versions[name] = service.create_version(
                    name, templates, source, note or f"scorer {scorer}", evidence.get(name, [])
                )
    return ReprocessSummary(len(rows), total, dict(counts), outputs, versions)


@contextmanager
def _experience(settings: Settings, given: ExperienceService | None) -> Iterator[ExperienceService]:
    if given is not None:
        yield given
        return
    # Imported here: the services pull in every store, which the Ray Data workers never need.
    from cluster.services import build_experience_service
    from cluster.storage.milvus import open_milvus
    from pipelines.reindex import served_milvus

    with served_milvus(settings) as uri:
        token = settings.milvus_token.get_secret_value() if settings.milvus_token else None
        client = open_milvus(uri, token, dedicated=True)
        db = Database(settings.sql_url())
        try:
            yield build_experience_service(settings, db, client=client)
        finally:
            db.dispose()
            client.close()
