"""What the console shows, read from the stores for one owner: JSON-ready dicts, nothing written.

Every function takes the owner the caller's credential names and reads only that owner's rows
(each store call is constrained by it); another owner's id is ``NotFound``, as in the tools.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from actors.engine import attribute_batch
from actors.engine.model.templates import ExperienceTemplate
from actors.engine.model.trajectories import Node, Trajectory
from cluster.analysis import load_scorer
from cluster.core.errors import InvalidInput, NotFound
from cluster.core.owner import check_owner
from cluster.experience.repository import SqlExperienceStore
from cluster.experience.versions import LibraryVersions
from cluster.memory.models import MemoryQuery, MemoryRecord
from cluster.memory.repository.rows import StoredMemory
from cluster.memory.repository.versions import Versions
from cluster.services import Services
from cluster.trajectories.repository import SqlTrajectoryStore

#: Rows a list shows: the console is for looking, the CLI and the exports are for everything.
LIST_LIMIT = 200
#: Stored trajectories of the same role and task type that a trajectory's credit is judged against
#: (the attribution workers use up to 200; a page must answer in a moment).
HISTORY_LIMIT = 50
#: Memories a search shows, with why each matched.
SEARCH_TOP_K = 10


def parse_id(value: str, field: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidInput(f"{field}: {value!r} is not a UUID") from None


def parse_int(value: str, field: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise InvalidInput(f"{field}: {value!r} is not a whole number") from None
    if number < 1:
        raise InvalidInput(f"{field}: library versions start at 1, got {number}")
    return number


# ----------------------------------------------------------------------------------- trajectories


def trajectories(services: Services, owner: str) -> dict[str, Any]:
    check_owner(owner)
    with services.db.read() as session:
        entries = SqlTrajectoryStore(session).recent(owner, LIST_LIMIT)
    return {
        "trajectories": [
            {
                "trajectory_id": e.header.trajectory_id,
                "role": e.header.role,
                "task": e.header.task,
                "task_type": e.header.task_type,
                "status": e.status,
                "outcome": e.outcome,
                "nodes": e.node_count,
                "analysis": e.analysis,
                "created_at": e.created_at,
            }
            for e in entries
        ]
    }


def trajectory(services: Services, owner: str, trajectory_id: uuid.UUID) -> dict[str, Any]:
    """One trajectory as a tree laid out for drawing, each decision node with its credit as the
    configured scorer gives it today (against the owner's stored runs of the same kind), the
    contrasts it takes part in, and the templates of the active library that cite it."""
    check_owner(owner)
    settings = services.settings
    with services.db.read() as session:
        store = SqlTrajectoryStore(session)
        current = store.load(owner, trajectory_id)
        header = current.header
        roles = services.experience.roles.served_roles(header.role)
        ids = [i for i in store.history(owner, roles, header.task_type, HISTORY_LIMIT) if i != trajectory_id]
        history = store.load_many(owner, ids)
        members = store.run_members(owner, [header.run_id], known=[trajectory_id, *ids]) if header.run_id else []
    load_scorer(settings.scorer, settings.scorer_modules)  # registers a scorer of one's own under its name
    result = attribute_batch([current], history, scorer=settings.scorer, run_members=members)[0]
    scores = {s.node_id: s.score for s in result.node_scores}
    place = layout(current)
    others = {t.trajectory_id: t for t in history}
    return {
        "trajectory_id": trajectory_id,
        "role": header.role,
        "agent_id": header.agent_id,
        "task": header.task,
        "task_type": header.task_type,
        "run_id": header.run_id,
        "status": current.status,
        "outcome": current.outcome.status if current.outcome else None,
        "scorer": result.scorer,
        "compared_with": len(history),
        "nodes": [_node(n, scores.get(n.node_id), place[n.node_id]) for n in current.nodes],
        "contrasts": [
            {
                "kind": c.kind,
                "signature": c.signature,
                "strength": round(c.strength, 3),
                "good": _side(c.good.trajectory_id, c.good.node_id, c.good.action, c.good.score, trajectory_id, others),
                "bad": _side(c.bad.trajectory_id, c.bad.node_id, c.bad.action, c.bad.score, trajectory_id, others),
            }
            for c in result.contrasts
        ],
        "templates": _citing(services, owner, trajectory_id),
    }


def layout(trajectory: Trajectory) -> dict[uuid.UUID, tuple[float, int]]:
    """Each node's column and depth: leaves take one column each in arrival order, a parent sits
    over the middle of its children, so sibling branches (the agent tried again) stand side by side."""
    children = trajectory.children()
    place: dict[uuid.UUID, tuple[float, int]] = {}
    column = 0

    def visit(node: Node, depth: int) -> float:
        nonlocal column
        kids = children.get(node.node_id, [])
        if not kids:
            x = float(column)
            column += 1
        else:
            xs = [visit(kid, depth + 1) for kid in kids]
            x = (xs[0] + xs[-1]) / 2
        place[node.node_id] = (x, depth)
        return x

    for root in children.get(None, []):
        visit(root, 0)
    # A node whose parent was never recorded is still shown, as a root of its own.
    known = {n.node_id for n in trajectory.nodes}
    for node in trajectory.nodes:
        if node.node_id not in place and node.parent_id not in known:
            visit(node, 0)
    return place


def _node(node: Node, score: float | None, place: tuple[float, int]) -> dict[str, Any]:
    result = node.execution_result
    return {
        "node_id": node.node_id,
        "parent_id": node.parent_id,
        "seq": node.seq,
        "action": node.chosen_action,
        "available": node.available_actions,
        "params": node.action_params,
        "context": node.context_snapshot,
        "result": result.status,
        "summary": result.summary,
        "reasoning": node.llm_reasoning,
        "score": None if score is None else round(score, 3),
        "x": place[0],
        "depth": place[1],
    }


def _side(
    trajectory_id: uuid.UUID,
    node_id: uuid.UUID,
    action: str,
    score: float,
    here: uuid.UUID,
    others: dict[uuid.UUID, Trajectory],
) -> dict[str, Any]:
    other = others.get(trajectory_id)
    return {
        "trajectory_id": trajectory_id,
        "node_id": node_id,
        "action": action,
        "score": round(score, 3),
        "here": trajectory_id == here,
        "task": other.header.task if other else None,
    }


def _citing(services: Services, owner: str, trajectory_id: uuid.UUID) -> list[dict[str, Any]]:
    with services.db.read() as session:
        store = SqlExperienceStore(session)
        version = store.active_version(owner)
        found = [
            t
            for t, _ in store.iter_owner(owner, version=version)
            if any(p.trajectory_id == trajectory_id for p in t.provenance)
        ]
    return [_template_line(t) for t in found[:LIST_LIMIT]]


# ---------------------------------------------------------------------------------------- library


def library(services: Services, owner: str, version: int | None) -> dict[str, Any]:
    """The owner's library versions and the templates of one (the active one by default)."""
    check_owner(owner)
    versions = LibraryVersions(services.db).versions(owner)
    active = next((v.version for v in versions if v.active), None)
    chosen = version if version is not None else active
    templates: list[ExperienceTemplate] = []
    if chosen is not None:
        with services.db.read() as session:
            store = SqlExperienceStore(session)
            if not store.has_version(owner, chosen):
                raise NotFound(f"library version {chosen} not found")
            templates = [t for t, _ in store.iter_owner(owner, version=chosen)]
    templates.sort(key=lambda t: (t.retired_reason is not None, -t.confidence, t.created_at))
    return {
        "versions": [v.model_dump(mode="json") for v in versions],
        "version": chosen,
        "active": active,
        "total": len(templates),
        "templates": [_template_line(t) for t in templates[:LIST_LIMIT]],
    }


def _template_line(t: ExperienceTemplate) -> dict[str, Any]:
    return {
        "template_id": t.template_id,
        "role": t.role,
        "task_type": t.task_type,
        "rule": t.brief(),
        "confidence": round(t.confidence, 3),
        "support": t.support.model_dump(),
        "source": t.source,
        "retired": t.retired_reason,
        "supplementary": t.parent_id is not None,
    }


def template(services: Services, owner: str, template_id: uuid.UUID) -> dict[str, Any]:
    """One template whole: its rule, evidence, confidence history and the trajectories behind it."""
    check_owner(owner)
    t = services.experience.get_template(owner, template_id)
    changes = services.experience.history(owner, template_id)
    tasks = _tasks(services, owner, [p.trajectory_id for p in t.provenance])
    return {
        **_template_line(t),
        "text": t.render(),
        "condition": t.condition.render(),
        "recommended": t.recommended.render(),
        "avoid": t.avoid.render() if t.avoid else None,
        "avoid_reason": t.avoid_reason,
        "rationale": t.rationale,
        "caveats": t.caveats,
        "signature": t.signature,
        "retry": t.retry,
        "tested": t.tested,
        "belief": t.belief.model_dump() if t.belief else None,
        "parent_id": t.parent_id,
        "created_at": t.created_at,
        "updated_at": t.updated_at,
        "provenance": [
            {
                "trajectory_id": p.trajectory_id,
                "node_ids": p.node_ids,
                "kind": p.kind,
                # None: the trajectory is no longer stored (the template outlives its evidence).
                "task": tasks.get(p.trajectory_id),
            }
            for p in t.provenance
        ],
        "history": [c.model_dump(mode="json", exclude={"template_id"}) for c in changes],
    }


def _tasks(services: Services, owner: str, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    with services.db.read() as session:
        found = SqlTrajectoryStore(session).load_many(owner, list(dict.fromkeys(ids))[:LIST_LIMIT])
    return {t.trajectory_id: t.header.task for t in found}


def diff(services: Services, owner: str, a: int, b: int) -> dict[str, Any]:
    return LibraryVersions(services.db).diff(check_owner(owner), a, b).model_dump(mode="json")


# ----------------------------------------------------------------------------------------- memory


def memories(services: Services, owner: str) -> dict[str, Any]:
    """The owner's newest current memories."""
    check_owner(owner)
    with services.db.read() as session:
        rows = Versions(session, owner, services.db.dialect).newest(LIST_LIMIT)
    return {"memories": [_memory(m) for m in rows]}


def memory(services: Services, owner: str, memory_id: uuid.UUID) -> dict[str, Any]:
    """Every version of the memory this id is one version of, oldest first."""
    check_owner(owner)
    with services.db.read() as session:
        versions = Versions(session, owner, services.db.dialect)
        lineage = versions.lineage(versions.get(memory_id).lineage_id)
    return {"memory_id": memory_id, "versions": [_memory(m) for m in lineage]}


def _memory(m: StoredMemory) -> dict[str, Any]:
    return {**_record(m.record), "activity": round(m.activity, 3)}


def _record(r: MemoryRecord) -> dict[str, Any]:
    return {
        "memory_id": r.memory_id,
        "key": r.key,
        "value": r.value,
        "scope": r.scope.model_dump(mode="json", exclude_none=True),
        "entity": r.entity,
        "metadata": r.metadata,
        "source_ids": r.source_ids,
        "version": r.version,
        "state": r.state,
        "archived": r.archived,
        "created_at": r.created_at,
        "valid_from": r.valid_from,
        "expires_at": r.expires_at,
    }


def search(services: Services, owner: str, query: str, entity: str | None = None) -> dict[str, Any]:
    """What ``memory_query`` would answer, with why each memory matched; it counts as no use of them
    (their activity, which ranks them, stays as it was)."""
    request = MemoryQuery.model_validate({"query": query, "entity": entity or None, "top_k": SEARCH_TOP_K})
    result = services.memory.run_query(check_owner(owner), request, record_access=False)
    return {
        "query": query,
        "candidates": result.candidates,
        "expansions": result.expansions,
        "hits": [
            {"memory": _record(h.memory), "score": round(h.score, 4), "why": h.why.model_dump(mode="json")}
            for h in result.hits
        ],
    }
