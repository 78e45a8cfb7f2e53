"""Outcome labels: every root-to-leaf path of a trajectory is positive, negative or partial.

Rules (hindsight step 1):

* A path's own label comes from its leaf's execution result: success → positive, failure →
  negative, partial → partial. Failures in the middle of a path do not change the path label: a
  path that recovered still ended well; the credit step charges the failing node itself.
* The *final* path is the one whose leaf arrived last (highest ``seq``): that is where the task
  ended, so the trajectory outcome also applies to it and the label is the worse of the two.
  Abandoned branches are judged by their own leaves only.
* A trajectory *blamed* for a later role's failure in its multi-agent run
  (:mod:`actors.engine.handoff`) has its final path labelled negative: that path is what it
  handed on.

The tree walk here tolerates what a store should never hand over (a parent id that is not in the
trajectory, a parent cycle): such nodes are treated as roots or skipped instead of raising, so a
batch never dies on one malformed trajectory.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field

from actors.engine.model.trajectories import Node, ResultStatus, Trajectory
from cluster.core.types import Frozen


class PathLabel(StrEnum):
    POSITIVE = "positive"
    NEGATIVE = "negative"
    PARTIAL = "partial"


_FROM_STATUS = {
    ResultStatus.SUCCESS: PathLabel.POSITIVE,
    ResultStatus.FAILURE: PathLabel.NEGATIVE,
    ResultStatus.PARTIAL: PathLabel.PARTIAL,
}
_RANK = {PathLabel.NEGATIVE: 0, PathLabel.PARTIAL: 1, PathLabel.POSITIVE: 2}

LABEL_VALUE = {PathLabel.POSITIVE: 1.0, PathLabel.PARTIAL: 0.0, PathLabel.NEGATIVE: -1.0}
"""Numeric value of a label, used by the scorers."""


class LabelledPath(Frozen):
    """One root-to-leaf path and its outcome label."""

    leaf_id: uuid.UUID
    node_ids: tuple[uuid.UUID, ...] = Field(description="Root first, leaf last.")
    label: PathLabel
    final: bool = Field(description="True for the path where the task ended (its leaf arrived last).")
    blamed_by: uuid.UUID | None = Field(
        default=None, description="On a final path: the later trajectory of the run whose failure it is charged with."
    )


@dataclass(frozen=True, slots=True)
class TreeIndex:
    """Parent/child structure of a trajectory, computed once and shared by the engine steps.

    Attributes:
        by_id: Nodes by id.
        children: Child ids by node id, in arrival order.
        order: Every reachable node id, parents before children (breadth-first from the roots).
        leaves: Reachable leaf ids in arrival order.
        parent: Parent id of every reachable node (None for a root).
    """

    by_id: dict[uuid.UUID, Node]
    children: dict[uuid.UUID, list[uuid.UUID]]
    order: list[uuid.UUID]
    leaves: list[uuid.UUID]
    parent: dict[uuid.UUID, uuid.UUID | None]


def index_tree(trajectory: Trajectory) -> TreeIndex:
    """Build the parent/child index of a trajectory in one pass."""
    by_id: dict[uuid.UUID, Node] = {}
    for node in trajectory.nodes:
        by_id.setdefault(node.node_id, node)
    children: dict[uuid.UUID, list[uuid.UUID]] = {nid: [] for nid in by_id}
    roots: list[uuid.UUID] = []
    for nid, node in by_id.items():
        if node.parent_id is None or node.parent_id not in by_id:
            roots.append(nid)
        else:
            children[node.parent_id].append(nid)
    order: list[uuid.UUID] = []
    parent: dict[uuid.UUID, uuid.UUID | None] = {}
    for root in roots:
        parent[root] = None
    # Breadth-first from the roots: nodes caught in a parent cycle are never reached, so never looped on.
    queue = list(roots)
    head = 0
    while head < len(queue):
        nid = queue[head]
        head += 1
        order.append(nid)
        for child in children[nid]:
            if child not in parent:
                parent[child] = nid
                queue.append(child)
    seq = {nid: by_id[nid].seq for nid in order}
    leaves = sorted((nid for nid in order if not children[nid]), key=lambda n: seq[n])
    return TreeIndex(by_id=by_id, children=children, order=order, leaves=leaves, parent=parent)


def path_to(tree: TreeIndex, leaf_id: uuid.UUID) -> tuple[uuid.UUID, ...]:
    """Ids from the root down to ``leaf_id``."""
    path = [leaf_id]
    up = tree.parent[leaf_id]
    while up is not None:
        path.append(up)
        up = tree.parent[up]
    path.reverse()
    return tuple(path)


def worse(a: PathLabel, b: PathLabel) -> PathLabel:
    return a if _RANK[a] <= _RANK[b] else b


def label_paths(
    trajectory: Trajectory, tree: TreeIndex | None = None, blamed_by: uuid.UUID | None = None
) -> list[LabelledPath]:
    """Label every root-to-leaf path of ``trajectory``.

    Args:
        trajectory: The trajectory, usually finalized (an open one is labelled from leaves only).
        tree: A precomputed index, to avoid building it twice.
        blamed_by: The later trajectory of its run that failed through its hand-off, if any
            (:func:`actors.engine.handoff.blame`): the final path is then negative.

    Returns:
        One labelled path per leaf, in leaf arrival order.
    """
    tree = tree or index_tree(trajectory)
    if not tree.leaves:
        return []
    final_leaf = tree.leaves[-1]
    outcome = trajectory.outcome
    out: list[LabelledPath] = []
    for leaf in tree.leaves:
        label = _FROM_STATUS[tree.by_id[leaf].execution_result.status]
        is_final = leaf == final_leaf
        if is_final and outcome is not None:
            label = worse(label, _FROM_STATUS[outcome.status])
        blamer = blamed_by if is_final else None
        if blamer is not None:
            label = PathLabel.NEGATIVE
        out.append(
            LabelledPath(leaf_id=leaf, node_ids=path_to(tree, leaf), label=label, final=is_final, blamed_by=blamer)
        )
    return out
