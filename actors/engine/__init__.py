"""Hindsight attribution engine: pure functions from trajectories to experience templates.

No Ray, database or network here (an import-linter contract enforces it), so a notebook can
import it and the Ray actors and Ray Data jobs wrap the same :func:`attribute_batch`.

Steps, one module each: :mod:`~actors.engine.labels` (path outcome labels),
:mod:`~actors.engine.credit` (pluggable contribution scorers), :mod:`~actors.engine.signature`
(what counts as the same decision point), :mod:`~actors.engine.contrast` (success vs failure
pairs, sensitivity), :mod:`~actors.engine.cost` (what a choice cost),
:mod:`~actors.engine.conditions` (learned conditions, and their evaluation for serving),
:mod:`~actors.engine.disjunction` (conditions with alternatives),
:mod:`~actors.engine.generalize` (placeholders and patterns), :mod:`~actors.engine.templates`
(distillation), :mod:`~actors.engine.confidence` and :mod:`~actors.engine.library` (merging).
"""

from actors.engine.batch import AttributionResult, NodeScore, attribute, attribute_batch
from actors.engine.conditions import LearnedCondition, learn_condition
from actors.engine.confidence import (
    apply_outcome,
    carry_feedback,
    confidence_of,
    evidence_belief,
    implied_belief,
    initial_confidence,
    lower_bound,
    served_feedback,
)
from actors.engine.contrast import ChoiceRef, Contrast, ContrastKind
from actors.engine.cost import Cost, CostGap, compare_costs, node_costs, read_cost
from actors.engine.credit import (
    CreditContext,
    LeafCounts,
    Scorer,
    add_scorer,
    available_scorers,
    get_scorer,
    register_scorer,
    unregister_scorer,
)
from actors.engine.evaluation import evaluate_condition, evaluate_features
from actors.engine.features import flatten_context
from actors.engine.generalize import generalize_params
from actors.engine.labels import LabelledPath, PathLabel, label_paths
from actors.engine.library import MergeResult, contradicted, merge_into_library
from actors.engine.signature import DecisionSignature, decision_signature

__all__ = [
    "AttributionResult",
    "ChoiceRef",
    "Contrast",
    "ContrastKind",
    "Cost",
    "CostGap",
    "CreditContext",
    "DecisionSignature",
    "LabelledPath",
    "LeafCounts",
    "LearnedCondition",
    "MergeResult",
    "NodeScore",
    "PathLabel",
    "Scorer",
    "add_scorer",
    "apply_outcome",
    "attribute",
    "attribute_batch",
    "available_scorers",
    "carry_feedback",
    "compare_costs",
    "confidence_of",
    "contradicted",
    "decision_signature",
    "evaluate_condition",
    "evaluate_features",
    "evidence_belief",
    "flatten_context",
    "generalize_params",
    "get_scorer",
    "implied_belief",
    "initial_confidence",
    "label_paths",
    "learn_condition",
    "lower_bound",
    "merge_into_library",
    "node_costs",
    "read_cost",
    "register_scorer",
    "served_feedback",
    "unregister_scorer",
]
