"""Backward credit assignment: a contribution score in [-1, 1] for every decision node.

Scores are bounded: -1 means "this choice led to failure", +1 "led to success", 0 "no effect or
mixed". Whatever a scorer returns is clipped to [-1, 1] by :func:`score_nodes`, and only decision
nodes (``node.is_decision``: more than one distinct available action) are kept; execution steps
have no choice to credit.

Scorers are pluggable. A scorer is any callable ``(CreditContext) -> Mapping[node_id, float]``,
or a class whose no-argument instances are such callables; register it by name::

    @register_scorer("mine")
    def mine(ctx: CreditContext) -> dict[uuid.UUID, float]:
        return {nid: 1.0 if ctx.counts[nid].negative == 0 else -1.0 for nid in ctx.decision_ids}

Built in: ``default`` (rule-based), ``failure_averse`` (failures weigh double) and
``shortest_success`` (bonus for the shortest successful path).
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from actors.engine.labels import LabelledPath, PathLabel, TreeIndex, index_tree, label_paths
from actors.engine.model.trajectories import Node, ResultStatus, Trajectory
from cluster.core.errors import InvalidInput

logger = logging.getLogger(__name__)

SCORE_MIN = -1.0
SCORE_MAX = 1.0


@dataclass(frozen=True, slots=True)
class LeafCounts:
    """How many leaves below a node (itself included if it is a leaf) carry each label."""

    positive: int = 0
    negative: int = 0
    partial: int = 0
    charged_below: int = 0
    """Negative leaves whose path fails first at a later decision below this node (a different
    choice's own failure): what a node that did not fail itself is not blamed for."""

    @property
    def total(self) -> int:
        return self.positive + self.negative + self.partial


@dataclass(frozen=True, slots=True)
class CreditContext:
    """Everything a scorer may need, computed once per trajectory.

    Attributes:
        trajectory: The trajectory being scored.
        tree: Its parent/child index.
        paths: Labelled root-to-leaf paths.
        counts: Leaf label counts of each node's subtree.
        decision_ids: Decision nodes (the ones to score), parents before children.
    """

    trajectory: Trajectory
    tree: TreeIndex
    paths: Sequence[LabelledPath]
    counts: Mapping[uuid.UUID, LeafCounts]
    decision_ids: Sequence[uuid.UUID]


class Scorer(Protocol):
    def __call__(self, ctx: CreditContext, /) -> Mapping[uuid.UUID, float]: ...


_REGISTRY: dict[str, Scorer] = {}
T = TypeVar("T")


def register_scorer(name: str, *, replace: bool = False) -> Callable[[T], T]:
    """Register a scorer function or class under ``name``; use as a decorator.

    Args:
        name: Registry name, passed later as ``attribute_batch(..., scorer=name)``.
        replace: Allow replacing an existing registration (otherwise a clash is an error).

    Returns:
        A decorator that registers its argument and returns it unchanged. A class is
        instantiated once, without arguments.

    Raises:
        InvalidInput: The name is taken, or the object is not callable.
    """

    def decorator(obj: T) -> T:
        add_scorer(name, obj, replace=replace)
        return obj

    return decorator


def add_scorer(name: str, obj: object, *, replace: bool = False) -> None:
    """Register ``obj`` (a scorer function, callable instance or class) under ``name``."""
    if not name:
        raise InvalidInput("a scorer needs a non-empty name")
    if name in _REGISTRY and not replace:
        raise InvalidInput(f"scorer {name!r} is already registered; pass replace=True to override it")
    scorer: Any = obj() if isinstance(obj, type) else obj
    if not callable(scorer):
        raise InvalidInput(f"scorer {name!r} is not callable")
    _REGISTRY[name] = scorer


def unregister_scorer(name: str) -> None:
    _REGISTRY.pop(name, None)


def get_scorer(name: str) -> Scorer:
    """The scorer registered as ``name``.

    Raises:
        InvalidInput: No such scorer; the message lists the registered ones.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InvalidInput(f"unknown scorer {name!r}; registered: {', '.join(available_scorers())}") from None


def available_scorers() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def leaf_counts(tree: TreeIndex, paths: Sequence[LabelledPath]) -> dict[uuid.UUID, LeafCounts]:
    """Subtree leaf label counts for every node, in one bottom-up pass (O(nodes)).

    ``charged_below`` counts the negative leaves that a decision strictly below the node failed
    on its way to: such a failure is that later choice's, not this one's.
    """
    by_leaf = {p.leaf_id: p.label for p in paths}
    # One entry per node, (positive, negative, partial, unblamed negative): a node id is hashed
    # once per lookup, and there are four counts to read for every child.
    below: dict[uuid.UUID, tuple[int, int, int, int]] = {}
    for nid in reversed(tree.order):
        label = by_leaf.get(nid)
        p = int(label is PathLabel.POSITIVE)
        n = int(label is PathLabel.NEGATIVE)
        z = int(label is PathLabel.PARTIAL)
        free = n
        for child in tree.children[nid]:
            counts = below.get(child)
            if counts is not None:
                p += counts[0]
                n += counts[1]
                z += counts[2]
                free += 0 if _failed_decision(tree.by_id[child]) else counts[3]
        below[nid] = (p, n, z, free)
    out: dict[uuid.UUID, LeafCounts] = {}
    for nid in tree.order:
        p, n, z, free = below[nid]
        out[nid] = LeafCounts(p, n, z, n - free)
    return out


def _failed_decision(node: Node) -> bool:
    return node.is_decision and node.execution_result.status is ResultStatus.FAILURE


def credit_context(trajectory: Trajectory, blamed_by: uuid.UUID | None = None) -> CreditContext:
    """Index, label and count a trajectory: the input every scorer gets.

    ``blamed_by``: the later trajectory of its run that failed through its hand-off
    (:func:`actors.engine.handoff.blame`); its final path is then negative.
    """
    tree = index_tree(trajectory)
    paths = label_paths(trajectory, tree, blamed_by)
    counts = leaf_counts(tree, paths)
    decisions = [nid for nid in tree.order if tree.by_id[nid].is_decision]
    return CreditContext(trajectory=trajectory, tree=tree, paths=paths, counts=counts, decision_ids=decisions)


def score_nodes(ctx: CreditContext, scorer: str | Scorer = "default") -> dict[uuid.UUID, float]:
    """Run a scorer and keep its scores for decision nodes only, clipped to [-1, 1].

    Args:
        ctx: From :func:`credit_context`.
        scorer: A registered name or a scorer callable.

    Returns:
        Score by decision node id, in ``ctx.decision_ids`` order; a decision node the scorer
        left out scores 0.

    Raises:
        InvalidInput: Unknown scorer name, or a score that is not a finite number.
    """
    fn = get_scorer(scorer) if isinstance(scorer, str) else scorer
    raw = fn(ctx)
    out: dict[uuid.UUID, float] = {}
    for nid in ctx.decision_ids:
        value = float(raw.get(nid, 0.0))
        if not math.isfinite(value):
            raise InvalidInput(f"scorer returned {value!r} for node {nid}; scores must be finite")
        out[nid] = min(SCORE_MAX, max(SCORE_MIN, value))
    return out


def _own(status: ResultStatus) -> float:
    return 1.0 if status is ResultStatus.SUCCESS else -1.0 if status is ResultStatus.FAILURE else 0.0


def _blend(ctx: CreditContext, downstream: Callable[[LeafCounts], float]) -> dict[uuid.UUID, float]:
    """40% the node's own result, 60% what its subtree ended in.

    A node's own result and what follows it are kept apart both ways. A node that failed
    itself gets no credit from descendants that recovered: the recovery was the later choice's
    merit. A node that did not fail is not blamed for failures a later decision made on its own
    (``charged_below``): those leaves count as neither success nor failure for it, so a right
    first step in a task that a later, different choice lost never falls below neutral.
    """
    out: dict[uuid.UUID, float] = {}
    for nid in ctx.decision_ids:
        counts = ctx.counts[nid]
        own = _own(ctx.tree.by_id[nid].execution_result.status)
        if own >= 0 and counts.charged_below:
            counts = replace(
                counts, negative=counts.negative - counts.charged_below, partial=counts.partial + counts.charged_below
            )
        value = downstream(counts) if counts.total else 0.0
        if own < 0:
            value = min(value, 0.0)
        out[nid] = 0.4 * own + 0.6 * value
    return out


@register_scorer("default")
def default_scorer(ctx: CreditContext) -> dict[uuid.UUID, float]:
    """Rule-based: mean subtree outcome (positive +1, partial 0, negative -1) blended with the own result."""
    return _blend(ctx, lambda c: (c.positive - c.negative) / c.total)


@register_scorer("failure_averse")
def failure_averse_scorer(ctx: CreditContext) -> dict[uuid.UUID, float]:
    """Like ``default`` but a failed leaf weighs twice a successful one, so risky choices score lower."""
    return _blend(ctx, lambda c: (c.positive - 2 * c.negative) / (c.positive + c.partial + 2 * c.negative))


SHORTEST_BONUS = 0.25


@register_scorer("shortest_success")
def shortest_success_scorer(ctx: CreditContext) -> dict[uuid.UUID, float]:
    """Like ``default``, plus a bonus for decisions on the shortest positive path (ties: earliest leaf)."""
    scores = default_scorer(ctx)
    positives = [p for p in ctx.paths if p.label is PathLabel.POSITIVE]
    if positives:
        best = min(positives, key=lambda p: len(p.node_ids))
        for nid in best.node_ids:
            if nid in scores:
                scores[nid] = min(SCORE_MAX, scores[nid] + SHORTEST_BONUS)
    return scores
