"""Contrast extraction: the choice that led to success next to the one that led to failure.

Every scored decision node becomes an :class:`Observation` keyed by its decision signature (see
:mod:`actors.engine.signature`). Observations with the same signature are the same decision
point, whether they are sibling branches of one trajectory (the agent backtracked and chose
differently) or runs of different trajectories, stored history included. So an action the agent
did not choose here, but that succeeded elsewhere in the same situation, is evidence too.

A node's outcome is the sign of its contribution score: above ``+OUTCOME_THRESHOLD`` it
succeeded, below ``-OUTCOME_THRESHOLD`` it failed, in between it is neutral and ignored.

Sensitivity: a signature group is worth analysing only if some choice succeeded in it and some
failed — a different action, or the same tool with a different parameter value — or if two
actions succeeded and one clearly cost less. If every choice (or every order of two steps)
succeeded at about the same cost, the decision did not matter and no template is made.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import Field

from actors.engine.cost import Cost, compare_costs, costs_to_finish
from actors.engine.credit import CreditContext
from actors.engine.features import Scalar, flatten_context
from actors.engine.model.trajectories import Node, Trajectory
from actors.engine.signature import DecisionSignature, decision_signature, signature_key
from cluster.core.types import Frozen

Place = tuple[uuid.UUID, tuple[tuple[str, Scalar], ...]]
"""One trajectory in one situation (its flattened snapshot): where a repeated call is a retry."""

OUTCOME_THRESHOLD = 0.1
PAIRS_PER_CHOICE = 3


@dataclass(frozen=True, slots=True, eq=False)
class Observation:
    """One decision as evidence.

    Attributes:
        trajectory: The trajectory it belongs to.
        order: Position of that trajectory in the combined input (batch first, then history);
            fixes every later ordering so the engine is deterministic.
        node: The decision node.
        signature: Its decision signature; ``key`` is the string form.
        score: Contribution score in [-1, 1].
        features: The flattened context snapshot.
        in_batch: True for the trajectories being attributed now, False for stored history.
        cost: What the chosen action cost (:mod:`actors.engine.cost`).
    """

    trajectory: Trajectory
    order: int
    node: Node
    signature: DecisionSignature
    key: str
    score: float
    features: dict[str, Scalar] = field(repr=False)
    in_batch: bool
    cost: Cost = field(default_factory=Cost, repr=False)
    place: Place = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Read for every pair of tools at a decision (recovered failures, the population): built once.
        object.__setattr__(self, "place", (self.trajectory.trajectory_id, tuple(sorted(self.features.items()))))

    @property
    def action(self) -> str:
        return self.node.chosen_action

    @property
    def outcome(self) -> int:
        """+1 succeeded, -1 failed, 0 neutral."""
        if self.score >= OUTCOME_THRESHOLD:
            return 1
        if self.score <= -OUTCOME_THRESHOLD:
            return -1
        return 0

    def sort_key(self) -> tuple[int, int]:
        return (self.order, self.node.seq)


def observe(ctx: CreditContext, scores: dict[uuid.UUID, float], *, order: int, in_batch: bool) -> list[Observation]:
    """Observations for every scored decision node of one trajectory, in tree order."""
    traj = ctx.trajectory
    costs = costs_to_finish(traj)
    out: list[Observation] = []
    for nid in ctx.decision_ids:
        node = ctx.tree.by_id[nid]
        sig = decision_signature(traj, node)
        out.append(
            Observation(
                trajectory=traj,
                order=order,
                node=node,
                signature=sig,
                key=signature_key(sig),
                score=scores[nid],
                features=flatten_context(node.context_snapshot),
                in_batch=in_batch,
                cost=costs[nid],
            )
        )
    return out


def group_by_signature(observations: Iterable[Observation]) -> dict[str, list[Observation]]:
    """Observations by signature key; keys sorted, each group in input order."""
    groups: dict[str, list[Observation]] = {}
    for obs in observations:
        groups.setdefault(obs.key, []).append(obs)
    return {key: sorted(groups[key], key=Observation.sort_key) for key in sorted(groups)}


def is_sensitive(group: Sequence[Observation]) -> bool:
    """True when some choice at this decision point succeeded and some failed, or two actions
    succeeded and one was clearly cheaper (:func:`~actors.engine.cost.compare_costs`).

    Cheap pre-filter: if everything succeeded at the same cost (or everything failed) the choice
    did not change the outcome. Whether the *difference* is the action or a parameter value is
    decided when templates are distilled.
    """
    if any(o.outcome > 0 for o in group) and any(o.outcome < 0 for o in group):
        return True
    succeeded: dict[str, list[Cost]] = {}
    for obs in group:
        if obs.outcome > 0:
            succeeded.setdefault(obs.action, []).append(obs.cost)
    return any(compare_costs(succeeded[a], succeeded[b]) is not None for a in succeeded for b in succeeded if a != b)


class ContrastKind(StrEnum):
    SIBLING = "sibling"
    """Both choices branch from the same parent node of one trajectory."""
    CROSS = "cross"
    """The same decision signature in different places (other trajectories, or elsewhere in this one)."""


class ChoiceRef(Frozen):
    """One side of a contrast: a real node of a real trajectory."""

    trajectory_id: uuid.UUID
    node_id: uuid.UUID
    action: str
    score: float = Field(ge=-1.0, le=1.0)


class Contrast(Frozen):
    """A choice that led to success paired with one that led to failure at the same decision point."""

    signature: str
    kind: ContrastKind
    good: ChoiceRef
    bad: ChoiceRef
    strength: float = Field(ge=0.0, le=1.0, description="Half the score gap between the two choices.")


def _ref(obs: Observation) -> ChoiceRef:
    return ChoiceRef(
        trajectory_id=obs.trajectory.trajectory_id, node_id=obs.node.node_id, action=obs.action, score=obs.score
    )


def _is_sibling(a: Observation, b: Observation) -> bool:
    return a.order == b.order and a.node.parent_id == b.node.parent_id


def pair_contrasts(
    good: Sequence[Observation], bad: Sequence[Observation], limit: int = PAIRS_PER_CHOICE
) -> list[Contrast]:
    """Pair each good choice with up to ``limit`` bad ones and vice versa, siblings first.

    Pairing is capped so a signature seen in thousands of runs yields O(runs) contrasts, not
    O(runs²); the cap keeps the closest evidence (same parent, then same trajectory, then the
    earliest other runs).
    """
    by_parent: dict[tuple[int, uuid.UUID | None], list[Observation]] = {}
    for obs in bad:
        by_parent.setdefault((obs.order, obs.node.parent_id), []).append(obs)
    by_parent_good: dict[tuple[int, uuid.UUID | None], list[Observation]] = {}
    for obs in good:
        by_parent_good.setdefault((obs.order, obs.node.parent_id), []).append(obs)
    pairs: dict[tuple[uuid.UUID, uuid.UUID], tuple[Observation, Observation]] = {}
    for side, others, index in ((good, bad, by_parent), (bad, good, by_parent_good)):
        for obs in side:
            chosen = list(index.get((obs.order, obs.node.parent_id), ()))[:limit]
            for other in others:
                if len(chosen) >= limit:
                    break
                # Identity, not ==: equal-looking observations of different runs are different evidence.
                if all(other is not c for c in chosen):
                    chosen.append(other)
            for other in chosen:
                g, b = (obs, other) if side is good else (other, obs)
                pairs.setdefault((g.node.node_id, b.node.node_id), (g, b))
    out = []
    for g, b in sorted(pairs.values(), key=lambda gb: (gb[0].sort_key(), gb[1].sort_key())):
        kind = ContrastKind.SIBLING if _is_sibling(g, b) else ContrastKind.CROSS
        strength = min(1.0, max(0.0, (g.score - b.score) / 2))
        out.append(Contrast(signature=g.key, kind=kind, good=_ref(g), bad=_ref(b), strength=strength))
    return out
