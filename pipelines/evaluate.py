"""Offline evaluation of an experience library on held-out stored trajectories, with no agent running.

Pure: this module imports only the attribution engine and the models (an import-linter contract
holds it to that), so a notebook, a test or the ``hindsight evaluate`` command run the same code.

The protocol
------------
1. **Split by time.** One owner's finalized trajectories, oldest first (finalize time, then
   creation time, then id); the newest ``holdout`` share is the test set, the rest the training
   set. Every test trajectory is at least as new as every training one: the library never
   learns from the future it is judged on.
2. **Build the library from the training set only**, the way the attribution workers do
   (:mod:`cluster.analysis`): batches of ``batch_size`` trajectories in finalize order, each
   attributed with ``attribute_batch(batch, history, scorer)`` where the history is up to
   ``history_limit`` earlier training trajectories of the same role and task type, and the
   templates merged into the running library with ``merge_into_library``. Confidence moves
   with merges as it does live; outcome feedback (``report_outcome`` of served templates) is not
   replayed, since the stored ``served_template_ids`` name the live library's templates.
3. **Serve each held-out decision** (a node with more than one distinct available action) as
   ``query_experience`` would for its situation: the trajectory's role and task type, the
   node's context snapshot and available actions, the task text as the query text. Candidates
   are the library's templates of that role, of that task type or of none, with confidence at
   least ``min_confidence``; each is judged with :func:`actors.engine.serving.fit`, those not
   applicable are dropped, the rest ranked by :func:`~actors.engine.serving.rank_score` with
   the service's tie-break (applicability, score, confidence, id), and the top ``top_k`` served.
   **Text relevance is left out** (0 for every template): no embedder runs here. Two
   consequences: ranking is by fit and confidence alone, and the candidate pool is the whole
   library rather than the service's nearest ``max(6k, 32)`` Milvus neighbours plus the
   same-signature templates, so a template the live search would not reach may be served here.
   A template whose provenance names the evaluated trajectory is never a candidate for it,
   whatever library is passed in: a decision is never scored with its own trajectory's evidence.

The ground truth (scorer-free, so scorers compare on the same footing)
----------------------------------------------------------------------
* A decision node **succeeded** when its own result is ``success`` and at least one leaf of its
  subtree is on a positive path (:func:`actors.engine.label_paths`, which folds in the
  trajectory's outcome on the final path). It **failed** when its own result is ``failure``, or
  when no leaf below it is positive and at least one is negative. Otherwise (partial results,
  partial paths) it is neutral.
* The **alternatives** at a decision node are the decision nodes of the same trajectory with the
  same parent and the same decision signature (the agents' retry convention: a retry is the
  failed call's sibling), plus, for a failed node's child of the same signature, its parent
  (a failed *root* has no siblings, so its retry hangs under it).
* The actions **known to succeed** there are the chosen actions of the alternatives that
  succeeded; **known to fail**, of those that failed. Actions compare by tool name: parameter
  patterns are not checked.

The metrics, per decision node
------------------------------
* **hit@1** / **hit@k**: the top served template's / any served template's recommended tool is
  known to succeed there. The denominator is every decision with an action known to succeed
  (a decision served nothing is a miss). For a node whose own choice failed, the hit is against
  the alternative that succeeded: recommending the sibling that worked is right.
* **avoid precision**: of the served templates with an avoided action that was tried there (known
  to succeed or to fail), the share whose avoided tool failed there. Avoided actions nobody
  tried are not judged.
* **coverage**: the share of decisions served at least one template.
* **tokens served**: the prompt block (:func:`~actors.engine.model.templates.render_prompt_block`)
  measured with the caller's token counter (the CLI uses the embedder's tokenizer), summed.

Each decision node is one case, so a decision the agent tried three times weighs three times:
each attempt was a moment it could have asked.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, computed_field

from actors.engine import attribute_batch, merge_into_library
from actors.engine.credit import credit_context, get_scorer
from actors.engine.model.templates import ExperienceTemplate, render_prompt_block
from actors.engine.model.trajectories import Node, ResultStatus, Trajectory, TrajectoryStatus
from actors.engine.serving import Fit, applicable, fit, query_signature, rank_score, snapshot_features
from actors.engine.signature import decision_signature, signature_key
from cluster.core.errors import InvalidInput
from cluster.core.types import Frozen
from cluster.experience.models import MAX_TOP_K

TokenCounter = Callable[[str], int]


def count_words(text: str) -> int:
    """The fallback token counter: whitespace-separated words (the CLI uses the real tokenizer)."""
    return len(text.split())


class EvalConfig(Frozen):
    """How to split, build and serve; the defaults are the service's."""

    scorer: str = Field(default="default", min_length=1, description="A registered scorer name.")
    holdout: Annotated[float, Field(gt=0.0, lt=1.0, description="Newest share of trajectories held out.")] = 0.2
    top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K, description="Templates served per decision.")] = 5
    min_confidence: Annotated[float, Field(ge=0.0, le=1.0, description="The confidence threshold.")] = 0.7
    batch_size: Annotated[int, Field(ge=1, description="Trajectories per attribution batch.")] = 10
    history_limit: Annotated[int, Field(ge=0, description="Earlier trajectories given as history.")] = 200


class NodeOutcome(StrEnum):
    """The scorer-free verdict on a decision node (see the module docstring)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NEUTRAL = "neutral"


class Split(Frozen):
    """Training (older) and test (newer) trajectories of one owner."""

    train: tuple[Trajectory, ...]
    test: tuple[Trajectory, ...]


class DecisionCase(Frozen):
    """One held-out decision node and what is known to work there."""

    trajectory_id: uuid.UUID
    node_id: uuid.UUID
    role: str
    task_type: str | None
    chosen_action: str
    outcome: NodeOutcome
    known_good: tuple[str, ...] = Field(description="Tools known to succeed at this decision, sorted.")
    known_bad: tuple[str, ...] = Field(description="Tools known to fail at this decision, sorted.")


class DecisionResult(Frozen):
    """What the library served at one decision and how it scored."""

    case: DecisionCase
    served: tuple[uuid.UUID, ...] = Field(description="Template ids served, best first.")
    recommended: tuple[str, ...] = Field(description="Their recommended tools, best first.")
    hit_at_1: bool | None = Field(description="None when no action is known to succeed here.")
    hit_at_k: bool | None
    avoid_judged: int = Field(ge=0, description="Served avoided actions that were tried here.")
    avoid_correct: int = Field(ge=0, description="Of those, the ones that failed here.")
    tokens: int = Field(ge=0, description="Tokens of the prompt block served.")


def _ratio(numerator: int, denominator: int) -> float | None:
    return None if denominator == 0 else round(numerator / denominator, 4)


class Metrics(Frozen):
    """Counts over a set of decisions; the rates are derived from them (None: nothing to judge)."""

    decisions: int = 0
    judged: int = Field(default=0, description="Decisions with an action known to succeed.")
    hits_at_1: int = 0
    hits_at_k: int = 0
    covered: int = Field(default=0, description="Decisions served at least one template.")
    avoid_judged: int = 0
    avoid_correct: int = 0
    tokens: int = Field(default=0, description="Prompt block tokens served, summed over decisions.")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def hit_at_1(self) -> float | None:
        return _ratio(self.hits_at_1, self.judged)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def hit_at_k(self) -> float | None:
        return _ratio(self.hits_at_k, self.judged)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def avoid_precision(self) -> float | None:
        return _ratio(self.avoid_correct, self.avoid_judged)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def coverage(self) -> float | None:
        return _ratio(self.covered, self.decisions)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tokens_per_decision(self) -> float | None:
        return None if self.decisions == 0 else round(self.tokens / self.decisions, 1)

    @classmethod
    def of(cls, results: Iterable[DecisionResult]) -> Metrics:
        """Sum the counts of ``results``."""
        counts = dict.fromkeys(("decisions", "judged", "hits_at_1", "hits_at_k", "covered"), 0)
        avoid_judged = avoid_correct = tokens = 0
        for r in results:
            counts["decisions"] += 1
            counts["judged"] += r.hit_at_1 is not None
            counts["hits_at_1"] += bool(r.hit_at_1)
            counts["hits_at_k"] += bool(r.hit_at_k)
            counts["covered"] += bool(r.served)
            avoid_judged += r.avoid_judged
            avoid_correct += r.avoid_correct
            tokens += r.tokens
        return cls(**counts, avoid_judged=avoid_judged, avoid_correct=avoid_correct, tokens=tokens)


class GroupMetrics(Frozen):
    """Metrics of one role and task type."""

    role: str
    task_type: str | None
    metrics: Metrics


class EvaluationReport(Frozen):
    """The evaluation of one scorer's library on one owner's held-out trajectories."""

    owner: str
    config: EvalConfig
    token_counter: str = Field(description="What a token is here, e.g. the tokenizer's name.")
    train_trajectories: int
    test_trajectories: int
    split_at: datetime | None = Field(description="Finalize time of the oldest test trajectory.")
    library_size: int = Field(description="Templates learned from the training set.")
    servable: int = Field(description="Of those, the ones at or above the confidence threshold.")
    overall: Metrics
    by_group: tuple[GroupMetrics, ...] = Field(description="Per role and task type, sorted.")
    decisions: tuple[DecisionResult, ...] = ()


def time_order(
    finalized_at: datetime | None, created_at: datetime, trajectory_id: uuid.UUID
) -> tuple[datetime, datetime, str]:
    """The order :func:`split_by_time` holds out by: finalize time (else start time), start time, id."""
    return (finalized_at or created_at, created_at, str(trajectory_id))


def _time_key(t: Trajectory) -> tuple[datetime, datetime, str]:
    return time_order(t.finalized_at, t.created_at, t.trajectory_id)


def split_by_time(trajectories: Sequence[Trajectory], holdout: float) -> Split:
    """Hold out the newest ``holdout`` share of the finalized trajectories (at least one, and at
    least one left to learn from when there are two or more). Open trajectories are ignored.

    Raises:
        InvalidInput: ``holdout`` outside (0, 1).
    """
    ordered = sorted((t for t in trajectories if t.status is TrajectoryStatus.FINALIZED), key=_time_key)
    n_test = held_out_count(len(ordered), holdout)
    return Split(train=tuple(ordered[: len(ordered) - n_test]), test=tuple(ordered[len(ordered) - n_test :]))


def held_out_count(finalized: int, holdout: float) -> int:
    """How many of ``finalized`` trajectories :func:`split_by_time` holds out (the newest ones).

    Raises:
        InvalidInput: ``holdout`` outside (0, 1).
    """
    if not 0.0 < holdout < 1.0:
        raise InvalidInput("holdout must be within (0, 1)")
    if finalized < 2:
        return 0
    return min(finalized - 1, max(1, math.ceil(holdout * finalized)))


def build_library(
    trajectories: Sequence[Trajectory], scorer: str = "default", *, batch_size: int = 10, history_limit: int = 200
) -> tuple[ExperienceTemplate, ...]:
    """The library the attribution workers would have learned from ``trajectories`` (one owner's).

    Batches of ``batch_size`` in finalize order; each batch's history is up to ``history_limit`` of
    the most recent earlier trajectories of the same role and task type (of any task type for a
    batch trajectory without one), as :class:`cluster.analysis.AnalysisService` picks it.
    """
    ordered = sorted(trajectories, key=_time_key)
    library: tuple[ExperienceTemplate, ...] = ()
    for start in range(0, len(ordered), batch_size):
        batch = ordered[start : start + batch_size]
        earlier = ordered[:start]
        history: dict[uuid.UUID, Trajectory] = {}
        for role, task_type in sorted({(t.header.role, t.header.task_type) for t in batch}, key=str):
            same = [
                t for t in earlier if t.header.role == role and (task_type is None or t.header.task_type == task_type)
            ]
            for t in same[-history_limit:] if history_limit else []:
                history.setdefault(t.trajectory_id, t)
        # The workers wait for a run to be quiet, so they see every role of it (docs/learner.md).
        results = attribute_batch(batch, list(history.values()), scorer=scorer, run_members=ordered)
        outcomes = [o for r in results for o in r.outcomes]
        library = merge_into_library(library, [t for r in results for t in r.templates], outcomes).library
    return library


def node_outcomes(trajectory: Trajectory) -> dict[uuid.UUID, NodeOutcome]:
    """The scorer-free verdict on every decision node of ``trajectory``, parents before children."""
    ctx = credit_context(trajectory)
    out: dict[uuid.UUID, NodeOutcome] = {}
    for nid in ctx.decision_ids:
        status = ctx.tree.by_id[nid].execution_result.status
        counts = ctx.counts[nid]  # leaf labels below the node; the final path carries the outcome
        if status is ResultStatus.SUCCESS and counts.positive > 0:
            out[nid] = NodeOutcome.SUCCEEDED
        elif status is ResultStatus.FAILURE or (counts.positive == 0 and counts.negative > 0):
            out[nid] = NodeOutcome.FAILED
        else:
            out[nid] = NodeOutcome.NEUTRAL
    return out


def decision_cases(trajectory: Trajectory) -> list[DecisionCase]:
    """Every decision node of ``trajectory`` with the actions known to succeed or fail there, in arrival order."""
    outcomes = node_outcomes(trajectory)
    by_id = {n.node_id: n for n in trajectory.nodes}
    keys = {nid: signature_key(decision_signature(trajectory, by_id[nid])) for nid in outcomes}
    # Alternatives form components: same parent and signature, joined to a failed same-signature parent.
    root: dict[uuid.UUID, uuid.UUID] = {nid: nid for nid in outcomes}

    def find(nid: uuid.UUID) -> uuid.UUID:
        while root[nid] != nid:
            root[nid] = root[root[nid]]
            nid = root[nid]
        return nid

    first: dict[tuple[uuid.UUID | None, str], uuid.UUID] = {}
    for nid in outcomes:
        parent = by_id[nid].parent_id
        sibling = first.setdefault((parent, keys[nid]), nid)
        root[find(nid)] = find(sibling)
        if parent in outcomes and outcomes[parent] is NodeOutcome.FAILED and keys[parent] == keys[nid]:
            root[find(nid)] = find(parent)
    components: dict[uuid.UUID, list[uuid.UUID]] = {}
    for nid in outcomes:
        components.setdefault(find(nid), []).append(nid)
    cases = []
    for node in sorted((by_id[n] for n in outcomes), key=lambda n: n.seq):
        alternatives = components[find(node.node_id)]
        good = {by_id[a].chosen_action for a in alternatives if outcomes[a] is NodeOutcome.SUCCEEDED}
        bad = {by_id[a].chosen_action for a in alternatives if outcomes[a] is NodeOutcome.FAILED}
        cases.append(
            DecisionCase(
                trajectory_id=trajectory.trajectory_id,
                node_id=node.node_id,
                role=trajectory.header.role,
                task_type=trajectory.header.task_type,
                chosen_action=node.chosen_action,
                outcome=outcomes[node.node_id],
                known_good=tuple(sorted(good)),
                known_bad=tuple(sorted(bad)),
            )
        )
    return cases


def serve(
    library: Sequence[ExperienceTemplate],
    trajectory: Trajectory,
    node: Node,
    *,
    top_k: int = 5,
    min_confidence: float = 0.7,
) -> list[ExperienceTemplate]:
    """What ``query_experience`` would serve at ``node`` of ``trajectory`` (text relevance left out).

    Templates whose provenance names ``trajectory`` are never candidates: its own evidence must
    not judge it.
    """
    header = trajectory.header
    snapshot = node.context_snapshot
    actions = node.available_actions
    signature = query_signature(header.role, header.task_type, header.task, snapshot, actions)
    features = snapshot_features(snapshot)
    own = trajectory.trajectory_id
    ranked: list[tuple[bool, float, float, str, ExperienceTemplate]] = []
    for template in library:
        if template.confidence < min_confidence or template.role != header.role:
            continue
        if header.task_type is not None and template.task_type not in (header.task_type, None):
            continue
        if any(p.trajectory_id == own for p in template.provenance):
            continue
        if template.retired_reason is not None:
            continue  # kept for the record, never served
        judged = fit(template, snapshot, features, actions, signature)
        if judged is Fit.NOT_APPLICABLE:
            continue
        score = rank_score(judged, template.confidence, 0.0)
        ranked.append(
            (applicable(judged) is not False, score, template.confidence, str(template.template_id), template)
        )
    ranked.sort(key=lambda r: r[:4], reverse=True)
    return [r[4] for r in ranked[:top_k]]


def score_decision(
    case: DecisionCase, served: Sequence[ExperienceTemplate], count_tokens: TokenCounter
) -> DecisionResult:
    """Score what was served at one decision against what is known to work there."""
    recommended = tuple(t.recommended.tool for t in served)
    good, bad = set(case.known_good), set(case.known_bad)
    known = bool(good)
    avoided = [t.avoid.tool for t in served if t.avoid is not None and t.avoid.tool in good | bad]
    block = render_prompt_block(list(served))
    return DecisionResult(
        case=case,
        served=tuple(t.template_id for t in served),
        recommended=recommended,
        hit_at_1=(bool(recommended) and recommended[0] in good) if known else None,
        hit_at_k=bool(good & set(recommended)) if known else None,
        avoid_judged=len(avoided),
        avoid_correct=sum(1 for tool in avoided if tool in bad),
        tokens=count_tokens(block) if block else 0,
    )


def evaluate_library(
    library: Sequence[ExperienceTemplate],
    test: Sequence[Trajectory],
    *,
    top_k: int = 5,
    min_confidence: float = 0.7,
    count_tokens: TokenCounter = count_words,
) -> list[DecisionResult]:
    """Serve and score every decision node of the ``test`` trajectories, in order."""
    results = []
    for trajectory in test:
        by_id = {n.node_id: n for n in trajectory.nodes}
        for case in decision_cases(trajectory):
            served = serve(library, trajectory, by_id[case.node_id], top_k=top_k, min_confidence=min_confidence)
            results.append(score_decision(case, served, count_tokens))
    return results


def summarize(results: Sequence[DecisionResult]) -> tuple[Metrics, tuple[GroupMetrics, ...]]:
    """Overall metrics and metrics per (role, task type), sorted by role then task type."""
    groups: dict[tuple[str, str | None], list[DecisionResult]] = {}
    for r in results:
        groups.setdefault((r.case.role, r.case.task_type), []).append(r)
    per_group = tuple(
        GroupMetrics(role=role, task_type=task_type, metrics=Metrics.of(items))
        for (role, task_type), items in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))
    )
    return Metrics.of(results), per_group


def evaluate(
    trajectories: Sequence[Trajectory],
    config: EvalConfig | None = None,
    *,
    count_tokens: TokenCounter = count_words,
    token_counter: str = "words",
    keep_decisions: bool = False,
) -> EvaluationReport:
    """Split one owner's trajectories by time, learn a library from the older ones with
    ``config.scorer`` and score it on every decision of the newer ones (see the module docstring).

    Args:
        trajectories: One owner's stored trajectories (open ones are ignored).
        config: Split, scorer and serving parameters; default the service's.
        count_tokens: Counts the tokens of a prompt block.
        token_counter: The name of that counter, for the report.
        keep_decisions: Keep every decision's result in the report (for drill-down).

    Returns:
        The report; with fewer than two finalized trajectories nothing is held out and every
        metric is empty.

    Raises:
        InvalidInput: Trajectories of several owners, or an unknown scorer.
    """
    config = config or EvalConfig()
    owners = {t.owner for t in trajectories}
    if len(owners) > 1:
        raise InvalidInput(f"evaluate one owner at a time, got {len(owners)}: owners never share evidence")
    get_scorer(config.scorer)  # an unknown name fails here, even when there is nothing to learn from
    split = split_by_time(trajectories, config.holdout)
    library = build_library(
        split.train, config.scorer, batch_size=config.batch_size, history_limit=config.history_limit
    )
    results = evaluate_library(
        library, split.test, top_k=config.top_k, min_confidence=config.min_confidence, count_tokens=count_tokens
    )
    overall, by_group = summarize(results)
    return EvaluationReport(
        owner=next(iter(owners), ""),
        config=config,
        token_counter=token_counter,
        train_trajectories=len(split.train),
        test_trajectories=len(split.test),
        split_at=_time_key(split.test[0])[0] if split.test else None,
        library_size=len(library),
        servable=sum(1 for t in library if t.confidence >= config.min_confidence),
        overall=overall,
        by_group=by_group,
        decisions=tuple(results) if keep_decisions else (),
    )
