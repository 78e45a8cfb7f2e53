"""Batch entry point: attribute a batch of finalized trajectories, with optional stored history.

``attribute_batch`` is pure: no I/O, no clock, no randomness. Ray actors, ``@serve.batch`` and
Ray Data ``map_batches`` wrap this one function, and a notebook can call it directly. While it
runs, the cyclic garbage collector's automatic passes are paused (:func:`_cyclic_gc_paused`).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import uuid
from collections.abc import Iterator, Sequence

from pydantic import Field

from actors.engine.aims import distil_aims
from actors.engine.contrast import Contrast, Observation, group_by_signature, is_sensitive, observe
from actors.engine.credit import Scorer, credit_context, get_scorer, score_nodes
from actors.engine.handoff import blame
from actors.engine.labels import LabelledPath
from actors.engine.model.templates import ExperienceTemplate
from actors.engine.model.trajectories import Trajectory
from actors.engine.retire import ActionOutcome
from actors.engine.templates import Finding, distil_group
from cluster.core.types import Frozen

logger = logging.getLogger(__name__)


class NodeScore(Frozen):
    """Contribution of one decision node, in [-1, 1]."""

    node_id: uuid.UUID
    chosen_action: str
    score: float = Field(ge=-1.0, le=1.0)
    signature: str = Field(description="Decision signature key (see actors.engine.signature).")


class AttributionResult(Frozen):
    """What attribution found in one trajectory.

    Templates are listed once per batch, on the first input trajectory that contributed
    evidence to them, so a caller can merge the templates of all results without counting the
    same evidence twice. Contrasts are listed on every trajectory that has a side in them.
    """

    trajectory_id: uuid.UUID
    scorer: str
    path_labels: tuple[LabelledPath, ...]
    node_scores: tuple[NodeScore, ...] = Field(description="Decision nodes only, parents before children.")
    contrasts: tuple[Contrast, ...] = ()
    templates: tuple[ExperienceTemplate, ...] = ()
    outcomes: tuple[ActionOutcome, ...] = ()


def attribute_batch(
    trajectories: Sequence[Trajectory],
    history: Sequence[Trajectory] | None = None,
    scorer: str | Scorer = "default",
    run_members: Sequence[Trajectory] = (),
) -> list[AttributionResult]:
    """Attribute outcomes to decisions in a batch of trajectories and distil templates.

    Args:
        trajectories: The trajectories to attribute (finalized ones; an open one is judged on
            its leaves only). One result per entry, in order.
        history: Stored trajectories of similar tasks; their decisions are evidence for
            contrasts and conditions but get no result of their own. Trajectories also in the
            batch are ignored here.
        scorer: A registered scorer name (see :mod:`actors.engine.credit`) or a scorer callable.
        run_members: The other trajectories of the multi-agent runs that batch and history
            trajectories belong to (other roles). They decide who is blamed for a later role's
            failure (:mod:`actors.engine.handoff`) and are no evidence themselves. Without
            them, a trajectory is blamed only by run members in the batch or history.

    Returns:
        One :class:`AttributionResult` per input trajectory.

    Raises:
        InvalidInput: Unknown scorer, or a scorer returned a non-finite score.
    """
    with _cyclic_gc_paused():
        return _attribute_batch(trajectories, history, scorer, run_members)


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector's automatic passes while a batch is attributed.

    Attribution makes no reference cycles: all it allocates is freed by reference counting, and
    a pass finds nothing to collect. But it keeps several objects per decision alive until the
    batch ends (observations, outcomes, scores), so passes of the oldest generation, each of
    which walks every live object (the batch's trajectories too), come more often as the batch
    grows: at 1,000 trajectories of 50 nodes they took a quarter to two fifths of the time and
    made batch time grow faster than the batch. The switch is process-wide; collection resumes
    when the batch is done if it was on (a caller that turned it off keeps it off). A scorer
    that makes cycles leaves them to the first collection after the batch.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _attribute_batch(
    trajectories: Sequence[Trajectory],
    history: Sequence[Trajectory] | None,
    scorer: str | Scorer,
    run_members: Sequence[Trajectory],
) -> list[AttributionResult]:
    fn = get_scorer(scorer) if isinstance(scorer, str) else scorer
    scorer_name = scorer if isinstance(scorer, str) else getattr(scorer, "__name__", type(scorer).__name__)
    batch_ids = {t.trajectory_id for t in trajectories}
    pool = list(trajectories) + [t for t in (history or ()) if t.trajectory_id not in batch_ids]
    blamed = blame([*pool, *run_members])

    labels: list[tuple[LabelledPath, ...]] = []
    observations: list[Observation] = []
    per_trajectory: list[list[Observation]] = []
    for order, trajectory in enumerate(pool):
        ctx = credit_context(trajectory, blamed.get(trajectory.trajectory_id))
        scores = score_nodes(ctx, fn)
        in_batch = order < len(trajectories)
        obs = observe(ctx, scores, order=order, in_batch=in_batch)
        observations.extend(obs)
        if in_batch:
            labels.append(tuple(ctx.paths))
            per_trajectory.append(obs)

    findings: list[Finding] = []
    outcomes: list[ActionOutcome] = []
    pool_id = trajectories[0].trajectory_id if trajectories else None
    for group in group_by_signature(observations).values():
        if not any(o.in_batch for o in group):
            continue
        if is_sensitive(group):
            findings.extend(f for f in distil_group(group) if any(o.in_batch for o in f.evidence))
        # A tool that worked aimed one way and missed aimed another: evidence even where every
        # choice scored neutral or better (misses are partial results, not failures).
        findings.extend(f for f in distil_aims(group) if any(o.in_batch for o in f.evidence))
        if any(o.outcome < 0 for o in group):
            outcomes.extend(_outcome(o, pool_id) for o in group if o.outcome != 0)

    templates_by_order: dict[int, list[ExperienceTemplate]] = {}
    contrasts_by_order: dict[int, list[Contrast]] = {}
    order_of = {t.trajectory_id: i for i, t in enumerate(trajectories)}
    for finding in findings:
        owner = min(o.order for o in finding.evidence if o.in_batch)
        templates_by_order.setdefault(owner, []).append(finding.template)
        for contrast in finding.contrasts:
            sides = {order_of.get(contrast.good.trajectory_id), order_of.get(contrast.bad.trajectory_id)}
            for order in sorted(s for s in sides if s is not None):
                contrasts_by_order.setdefault(order, []).append(contrast)

    results = []
    for order, trajectory in enumerate(trajectories):
        node_scores = tuple(
            NodeScore(node_id=o.node.node_id, chosen_action=o.action, score=o.score, signature=o.key)
            for o in per_trajectory[order]
        )
        results.append(
            AttributionResult(
                trajectory_id=trajectory.trajectory_id,
                scorer=scorer_name,
                path_labels=labels[order],
                node_scores=node_scores,
                contrasts=tuple(contrasts_by_order.get(order, ())),
                templates=tuple(templates_by_order.get(order, ())),
                outcomes=tuple(outcomes) if order == 0 else (),
            )
        )
    logger.debug(
        "attributed %d trajectories (%d history), %d templates",
        len(trajectories),
        len(pool) - len(trajectories),
        len(findings),
    )
    return results


def _outcome(o: Observation, pool: uuid.UUID | None) -> ActionOutcome:
    # Built without validation: the parameters and context were validated with the node (the same
    # JsonObject rules). Validating them again copied both dicts of every outcome (one per decision
    # at a signature with a failure: 33,000 in a batch of 1,000) and took 2.5 times as long.
    return ActionOutcome.model_construct(
        signature=o.key,
        action=o.action,
        params=o.node.action_params,
        context=o.node.context_snapshot,
        succeeded=o.outcome > 0,
        trajectory_id=o.trajectory.trajectory_id,
        pool=pool,
    )


def attribute(
    trajectory: Trajectory, history: Sequence[Trajectory] | None = None, scorer: str | Scorer = "default"
) -> AttributionResult:
    """Attribute a single trajectory; see :func:`attribute_batch`."""
    return attribute_batch([trajectory], history, scorer)[0]
