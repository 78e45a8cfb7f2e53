"""What a choice cost, and whether one action is clearly cheaper than another.

Agents may report the cost of an action in its ``execution_result``, under these names:

* ``steps``: tool calls or sub-steps the action took;
* ``latency_ms``: wall-clock milliseconds;
* ``tokens``: LLM tokens spent (a number, or an object of numbers such as
  ``{"input": 812, "output": 95}``, which are added up).

They are read from a ``cost`` object in ``execution_result.data`` first, then from ``data``
itself (an agent may send them at the top level of ``execution_result``; the model moves them
into ``data``). Anything else (negative, NaN, text) is ignored. When no latency is reported it
is *derived* from node timestamps: the gap between the node and the node that arrived just
before it (an agent reports as it goes, so the gap is the time the step took). A decision is
compared by its cost *to finish* (:func:`costs_to_finish`): its own cost plus what it leads to, up
to the next decision reached after a success.

:func:`compare_costs` says one action is cheaper than another when, on the metrics both sides
have, its median cost is lower by at least ``COST_RATIO`` on one metric and not higher by that
much on any. Derived latencies count only when the medians differ by at least
``MIN_DERIVED_LATENCY_MS`` too: timestamps also hold the agent's thinking and the network.
Metrics are tried in the order tokens, latency, steps; the largest ratio is the one reported.
"""

from __future__ import annotations

import math
import statistics
import uuid
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import Field, JsonValue

from actors.engine.model.trajectories import ExecutionResult, ResultStatus, Trajectory
from cluster.core.types import Frozen

CostMetric = Literal["tokens", "latency_ms", "steps"]
METRICS: tuple[CostMetric, ...] = ("tokens", "latency_ms", "steps")
COST_RATIO = 1.25
"""One median must be at least this many times the other: smaller gaps are run-to-run noise."""
MIN_DERIVED_LATENCY_MS = 1000.0
"""A latency read off timestamps must differ by a second or more to count."""


class Cost(Frozen):
    """The cost of one executed action; None where nothing is known."""

    steps: float | None = Field(default=None, ge=0, description="Tool calls or sub-steps taken.")
    latency_ms: float | None = Field(default=None, ge=0, description="Wall-clock milliseconds.")
    tokens: float | None = Field(default=None, ge=0, description="LLM tokens spent.")
    latency_derived: bool = Field(default=False, description="True when latency_ms comes from node timestamps.")

    def get(self, metric: CostMetric) -> float | None:
        value: float | None = getattr(self, metric)
        return value


class CostGap(Frozen):
    """One action is cheaper than another: the metric that shows it best and both medians."""

    metric: CostMetric
    cheap: float = Field(ge=0, description="Median cost of the cheaper action.")
    costly: float = Field(ge=0, description="Median cost of the costlier action.")

    @property
    def ratio(self) -> float:
        return self.costly / self.cheap if self.cheap else math.inf

    def describe(self, cheap_tool: str, costly_tool: str) -> str:
        """``bulk_import costs 3× paste_rows (median 6 vs 2 steps)``."""
        unit = {"tokens": "tokens", "latency_ms": "ms", "steps": "steps"}[self.metric]
        medians = f"median {_number(self.costly)} vs {_number(self.cheap)} {unit}"
        if math.isinf(self.ratio):
            return f"{costly_tool} costs more than {cheap_tool} ({medians})"
        return f"{costly_tool} costs {_number(round(self.ratio, 1))}× {cheap_tool} ({medians})"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3g}"


def _amount(value: JsonValue | None) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) and value >= 0 else None
    if isinstance(value, Mapping):
        parts = [_amount(v) for v in value.values()]
        numbers = [p for p in parts if p is not None]
        return sum(numbers) if numbers else None
    return None


def read_cost(result: ExecutionResult) -> Cost:
    """The cost an agent reported in an execution result (see the module docstring for names)."""
    data = result.data
    nested = data.get("cost")
    sources = [nested, data] if isinstance(nested, Mapping) else [data]
    found: dict[str, float | None] = dict.fromkeys(METRICS)
    for metric in METRICS:
        found[metric] = next((a for s in sources if (a := _amount(s.get(metric))) is not None), None)
    return Cost(steps=found["steps"], latency_ms=found["latency_ms"], tokens=found["tokens"])


_UNKNOWN = Cost(steps=None, latency_ms=None, tokens=None)
"""What a node that reports nothing cost, as read_cost reads it (shared: a Cost is immutable)."""


def node_costs(trajectory: Trajectory) -> dict[uuid.UUID, Cost]:
    """The cost of every node: as reported, with latency from timestamps where none was sent."""
    out: dict[uuid.UUID, Cost] = {}
    previous: int | None = None
    for node in sorted(trajectory.nodes, key=lambda n: n.seq):
        result = node.execution_result
        cost = read_cost(result) if result.data else _UNKNOWN
        if cost.latency_ms is None and previous is not None and node.timestamp >= previous:
            cost = Cost(
                steps=cost.steps, latency_ms=float(node.timestamp - previous), tokens=cost.tokens, latency_derived=True
            )
        out.setdefault(node.node_id, cost)
        previous = node.timestamp
    return out


def costs_to_finish(trajectory: Trajectory) -> dict[uuid.UUID, Cost]:
    """What each node cost from there until the next decision its success leads to.

    A choice is only as cheap as what it commits to: ``set_encoding`` then ``export`` is two
    steps where ``export`` alone is one, though each call is one step. Retries under a node count
    too (they were spent because of it), and so do the execution steps it leads to. A decision
    reached after a successful step is a new occurrence with a cost of its own: the same decision
    taken again for the next item of a task, or the task's next decision, is not charged to this
    one (else the first of two equal choices would look dearer by everything after it). A metric
    no node of the span reports stays unknown.
    """
    own = node_costs(trajectory)
    by_id = {node.node_id: node for node in trajectory.nodes}
    children: dict[uuid.UUID | None, list[uuid.UUID]] = {}
    for node in trajectory.nodes:
        children.setdefault(node.parent_id, []).append(node.node_id)
    # Plain (steps, latency_ms, tokens, latency_derived) per node; each Cost is built once, at the end.
    spans: dict[uuid.UUID, tuple[float | None, float | None, float | None, bool]] = {}
    # Children arrive after their parents, so reverse arrival order visits every child first.
    for node in sorted(trajectory.nodes, key=lambda n: n.seq, reverse=True):
        below = children.get(node.node_id, [])
        if node.execution_result.status is ResultStatus.SUCCESS:
            below = [c for c in below if not by_id[c].is_decision]
        mine = own[node.node_id]
        parts = [(mine.steps, mine.latency_ms, mine.tokens, mine.latency_derived)]
        parts += [spans[c] for c in below if c in spans]
        totals: list[float | None] = []
        for k in range(3):
            values = [v for part in parts if (v := part[k]) is not None]
            totals.append(sum(values) if values else None)
        spans[node.node_id] = (totals[0], totals[1], totals[2], any(part[3] for part in parts))
    return {
        nid: Cost(steps=steps, latency_ms=latency, tokens=tokens, latency_derived=derived)
        for nid, (steps, latency, tokens, derived) in spans.items()
    }


def compare_costs(a: Sequence[Cost], b: Sequence[Cost]) -> CostGap | None:
    """How much cheaper ``a`` is than ``b`` (medians per metric), or None if it is not clearly cheaper.

    Args:
        a: Costs of the runs where one action succeeded.
        b: Costs of the runs where the other action succeeded.

    Returns:
        The metric with the largest ratio in ``a``'s favour, when ``a`` is cheaper on some
        metric and not dearer on any (by ``COST_RATIO``); else None.
    """
    best: CostGap | None = None
    for metric in METRICS:
        ma, derived_a = _median(a, metric)
        mb, derived_b = _median(b, metric)
        if ma is None or mb is None:
            continue
        if (derived_a or derived_b) and abs(ma - mb) < MIN_DERIVED_LATENCY_MS:
            continue
        if _clearly_less(mb, ma):
            return None  # dearer on this metric: no clear winner
        if _clearly_less(ma, mb):
            gap = CostGap(metric=metric, cheap=ma, costly=mb)
            if best is None or gap.ratio > best.ratio:
                best = gap
    return best


def _clearly_less(x: float, y: float) -> bool:
    return y > 0 and x * COST_RATIO <= y


def _median(costs: Sequence[Cost], metric: CostMetric) -> tuple[float | None, bool]:
    values = [(v, c.latency_derived and metric == "latency_ms") for c in costs if (v := c.get(metric)) is not None]
    if not values:
        return None, False
    return statistics.median(v for v, _ in values), any(d for _, d in values)
