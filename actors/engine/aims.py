"""Aims: the same tool, aimed at different things, makes progress in one situation and not in another.

``put(object="black blanket", target="chest of drawers")`` scores and ``put(..., target="bed")``
does not: the tool worked both times, the *aim* was wrong. The pair contrasts of
:mod:`actors.engine.templates` compare two calls at a time and need a condition separating
each pair; where a tool has many aims, each right in its own situations, that evidence is thin
per pair. Here each aim is learned against all the others at once.

For every tool that succeeded at a decision point, every plain constant parameter (a short
string or a boolean the call did not read off the situation: ``target="chest of drawers"``,
not ``object=<focus>``) and every value ``v`` it succeeded with:

* *positive* runs: the tool succeeded with ``v``, in at least ``MIN_RUNS`` trajectories (one
  run is no evidence of an aim: a per-instance id the call sent once is not one);
* *negative* runs: the tool was aimed at ``v`` and did not succeed (it failed, or did nothing:
  a partial result, neutral in credit), or it succeeded with another value (there, the
  situation called for that one);
* the condition separating them is learned as any other (:func:`learn_disjunction`, precision
  at least ``MIN_PRECISION``), and inside it there must be a miss of the tool aimed elsewhere:
  the template recommends the tool aimed at ``v`` and avoids it aimed elsewhere, both backed by
  real runs.

So "where does a blanket go" is ``When focus in {'black blanket', 'plaid blanket'}, prefer
put(object=<focus>, target="chest of drawers"); avoid put(target="bed")``. Template ids name
the value (``params.target == 'chest of drawers'``), so each aim is its own template.
"""

from __future__ import annotations

from collections.abc import Sequence

from actors.engine.conditions import as_population
from actors.engine.contrast import Observation
from actors.engine.disjunction import learn_disjunction
from actors.engine.evaluation import holds_all
from actors.engine.features import Features, Scalar, flatten_context
from actors.engine.generalize import CONSTANT_KINDS, string_kind
from actors.engine.model.templates import Predicate
from actors.engine.templates import MIN_PRECISION, Finding, _finding

PARAMS = "params"
MIN_RUNS = 2
"""Runs (trajectories) in which the tool succeeded aimed at a value before that value is an aim."""


def distil_aims(group: Sequence[Observation]) -> list[Finding]:
    """Aim templates for one signature group (observations sorted by :meth:`Observation.sort_key`)."""
    findings: list[Finding] = []
    population = as_population([o.features for o in group])
    tools = sorted({o.action for o in group if o.outcome > 0})
    for tool in tools:
        calls = [o for o in group if o.action == tool]
        aims = [_aims(o) for o in calls]
        if not any(o.outcome <= 0 for o in calls):
            continue
        keys = sorted({k for o, a in zip(calls, aims, strict=True) if o.outcome > 0 for k in a})
        for key in keys:
            worked = sorted({a[key] for o, a in zip(calls, aims, strict=True) if o.outcome > 0 and key in a}, key=repr)
            if len(worked) < 2 and not any(o.outcome <= 0 and key in a for o, a in zip(calls, aims, strict=True)):
                continue
            for value in worked:
                findings += _aim(tool, key, value, calls, aims, population)
    return findings


def _aims(obs: Observation) -> dict[str, Scalar]:
    """The call's plain constant parameters that it did not read off the situation."""
    situation = {v for v in obs.features.values() if isinstance(v, str)}
    out: dict[str, Scalar] = {}
    for key, value in flatten_context(obs.node.action_params, PARAMS).items():
        if isinstance(value, bool):
            out[key] = value
        elif isinstance(value, str) and value not in situation and string_kind(key, value) in CONSTANT_KINDS:
            out[key] = value
    return out


def _aim(
    tool: str,
    key: str,
    value: Scalar,
    calls: Sequence[Observation],
    aims: Sequence[dict[str, Scalar]],
    population: Sequence[Features],
) -> list[Finding]:
    aimed = [(o, a.get(key)) for o, a in zip(calls, aims, strict=True) if key in a]
    positive = [o for o, v in aimed if v == value and o.outcome > 0]
    negative = [o for o, v in aimed if (o.outcome > 0) if v != value] + [
        o for o, v in aimed if v == value and o.outcome <= 0
    ]
    misses = [o for o, v in aimed if v != value and o.outcome <= 0]
    if len({o.order for o in positive}) < MIN_RUNS or not misses:
        return []  # one run is no evidence of an aim (an id it sent once, a lucky guess)
    learned = learn_disjunction([o.features for o in positive], [o.features for o in negative], population=population)
    if learned is None or learned.precision < MIN_PRECISION:
        return []
    findings = []
    for predicates in learned.alternatives:
        recommended = [o for o in positive if holds_all(predicates, o.features)]
        avoided = [o for o in misses if holds_all(predicates, o.features)]
        if not recommended or not avoided:
            continue
        counter = [o for o, v in aimed if v == value and o.outcome <= 0 and holds_all(predicates, o.features)]
        name = key[len(PARAMS) + 1 :]
        findings.append(
            _finding(
                recommended,
                avoided,
                counter,
                identity=(tool, tool, (Predicate(feature=key, op="==", value=value), *predicates)),
                condition=predicates,
                rationale=f"{tool} made progress aimed at {name} = {value!r} here, and none aimed elsewhere",
                caveats=(),
                strength=max(0.0, learned.strength),
                avoid=(tool, avoided),
            )
        )
    return findings
