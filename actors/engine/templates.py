"""Distil experience templates from one decision point (a group of same-signature observations).

For every ordered pair of different actions ``(a, b)`` where ``a`` succeeded and ``b`` failed:

1. Only calls that fit the generalized patterns count against the preference
   (:func:`~actors.engine.generalize.fits_pattern`): a click on a made-up ``#id`` is no failure
   of ``click(selector="[type=submit]")``, and ``set_encoding("utf-8")`` working is no success
   of ``set_encoding("utf-16")``. Nor does a failure the same tool recovered from later in the
   same trajectory and situation (:func:`split_recovered`): the snapshot it failed in is the one
   it then worked in, so no condition can explain it; it counts only towards ``retry``.
2. A condition is learned only where the preference *flips*: ``a`` failed somewhere, or ``b``
   succeeded somewhere. If neither, the template has no condition, however the contexts of
   ``a``'s successes and ``b``'s failures differ. If only ``a`` flipped, the condition separates
   where ``a`` worked from where it failed; if only ``b`` did, where ``b`` failed from where it
   worked; if both, runs where the preference held (``a`` succeeded, ``b`` failed) from runs
   where it did not (:mod:`actors.engine.conditions`). Where one side flipped, the condition
   may have alternatives ("A or B", :mod:`actors.engine.disjunction`): each becomes a template
   of its own, and the rationale names the whole rule. If no condition separates them with
   precision ≥ ``MIN_PRECISION``, the outcome is not explained by this choice and no template
   is made (sensitivity filtering).
3. Inside the condition there must be at least one success of ``a`` and one failure of ``b``:
   a template always names a tool to prefer and one to avoid, both backed by real runs.
4. The calls are generalized (:mod:`actors.engine.generalize`), caveats come from the extra
   predicates that excluded failures of ``a`` itself, and confidence from support and strength.
5. Failures of ``a`` that the condition does not exclude and no other rule of the decision
   explains, with ``a`` working in most runs there and recovering when called again in the same
   situation, mark the template ``retry`` (:func:`worth_retrying`).

Cost counts (:mod:`actors.engine.cost`): when ``a`` clearly costs less than ``b`` where both
succeeded (median steps, latency or tokens), ``b``'s successes are no evidence against ``a``:
the pair is distilled even if ``b`` never failed, the condition says only where ``a`` itself
works, ``b``'s successes inside it are avoided as the costlier way
(``EvidenceKind.AVOIDED_COSTLIER``), and the rationale says so: ``Both work: … ; bulk_import
costs 3× paste_rows (median 6 vs 2 steps)``. The reverse pair (``b`` where ``a`` fails) is
learned as before and carries the caveat ``where a works it is the cheaper choice: …``.

When both halves of a joined condition test one feature, predicates that separate nothing
are dropped (:func:`~actors.engine.conditions.simplify`). A failure's reason is its
``summary``, or the ``error`` / ``message`` the agent sent in ``execution_result``.

Alternatives that never succeeded at this decision point (decoys: a tool that does not work
here at all) are taken together: for each recommended action, ONE template avoids the decoy
that failed most often and names the others in ``also avoid …`` caveats, instead of one
template per decoy. Its id does not depend on which decoys were seen, so later batches that
meet more decoys merge into it.

And for every action that both succeeded and failed: when exactly one plain parameter value
tells its successes from its failures (``encoding="utf-8"`` vs ``"latin-1"``), the parameter
was the decision, and the template recommends the tool with that value and avoids the other.

Template ids are UUIDv5 of the signature, the two tools and the condition, and timestamps come
from the evidence, so the same input always yields the same templates.
"""

from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from pydantic import JsonValue

from actors.engine.conditions import as_population, learn_condition, simplify
from actors.engine.confidence import confidence_of, evidence_belief
from actors.engine.contrast import Contrast, Observation, Place, pair_contrasts
from actors.engine.cost import CostGap, compare_costs
from actors.engine.disjunction import learn_disjunction, render_alternatives
from actors.engine.evaluation import holds, holds_all, is_number
from actors.engine.features import Features, flatten_context
from actors.engine.generalize import CONSTANT_KINDS, fits_pattern, generalize_params, sanitize_text, string_kind
from actors.engine.model.templates import (
    ActionPattern,
    Condition,
    EvidenceKind,
    ExperienceTemplate,
    Predicate,
    Provenance,
    Support,
)
from cluster.core.types import canonical_json

MIN_PRECISION = 0.75
ALSO_AVOID = "also avoid "
"""Prefix of the caveats that list further decoys; they widen a template, they are no edge case."""
CHEAPER_WHERE = "where "
"""Prefix of the caveat saying the avoided tool is cheaper wherever it works."""
DECOYS = "*decoys*"
TEMPLATE_NAMESPACE = uuid.UUID("6f1c2a8e-58a4-4a57-9d0e-3c1b8f0a9e21")


@dataclass(frozen=True, slots=True)
class Finding:
    """A template and the evidence and contrasts it was distilled from."""

    template: ExperienceTemplate
    evidence: tuple[Observation, ...]
    contrasts: tuple[Contrast, ...]
    unexplained: tuple[Observation, ...] = ()
    """Failures of the recommended call where the condition holds."""


def template_id(signature: str, recommended: str, avoid: str, predicates: Sequence[Predicate]) -> uuid.UUID:
    body = [signature, recommended, avoid, [p.model_dump(mode="json") for p in predicates]]
    return uuid.uuid5(TEMPLATE_NAMESPACE, canonical_json(body))


def distil_group(group: Sequence[Observation]) -> list[Finding]:
    """Templates for one signature group (observations sorted by :meth:`Observation.sort_key`)."""
    succeeded: dict[str, list[Observation]] = {}
    failed: dict[str, list[Observation]] = {}
    for obs in group:
        if obs.outcome > 0:
            succeeded.setdefault(obs.action, []).append(obs)
        elif obs.outcome < 0:
            failed.setdefault(obs.action, []).append(obs)
    findings = []
    decoys = sorted(set(failed) - set(succeeded))
    # Every situation of this decision point, once: it tells categories (values recur) from ids.
    # Calls retried in one situation share its context; counted per call, an id seen in a
    # situation tried three times would look like a value that recurs.
    population = as_population(list({o.place: o.features for o in group}.values()))
    costs = {action: [o.cost for o in runs] for action, runs in succeeded.items()}
    for good in sorted(succeeded):
        for bad in sorted(succeeded):
            if good == bad:
                continue
            # Both worked somewhere: a contrast if the other one also failed, or if this one is cheaper.
            cheaper = compare_costs(costs[good], costs[bad])
            if bad in failed or cheaper is not None:
                dearer = compare_costs(costs[bad], costs[good])
                findings += _distil_pair(good, (bad,), succeeded, failed, population, cheaper=cheaper, dearer=dearer)
        if decoys:
            findings += _distil_pair(good, tuple(decoys), succeeded, failed, population)
    for tool in sorted(set(succeeded) & set(failed)):
        finding = _distil_params(tool, succeeded[tool], failed[tool])
        if finding is not None:
            findings.append(finding)
    return [unless_explained(f, findings) for f in findings]


def unless_explained(finding: Finding, findings: Sequence[Finding]) -> Finding:
    """``finding`` without its retry mark when another rule of this decision explains its failures.

    Failures a condition of this template leaves unexplained may be another rule's evidence:
    ``export_csv`` failing on latin-1 pages with accents is what "there, set the encoding; avoid
    export_csv" was learned from. Such a failure repeats; it is no reason to retry.
    """
    template = finding.template
    if not template.retry:
        return finding
    for other in findings:
        avoided = other.template.avoid
        if other is finding or avoided is None or avoided.tool != template.recommended.tool:
            continue
        if any(holds_all(other.template.condition.predicates, o.features) for o in finding.unexplained):
            return replace(finding, template=template.model_copy(update={"retry": False}))
    return finding


def _distil_pair(
    good: str,
    bads: tuple[str, ...],
    succeeded: dict[str, list[Observation]],
    failed: dict[str, list[Observation]],
    population: Sequence[Features],
    *,
    cheaper: CostGap | None = None,
    dearer: CostGap | None = None,
) -> list[Finding]:
    """``good`` against one alternative that also succeeded somewhere, or against all the decoys at once.

    With ``cheaper`` (``good`` costs clearly less than the one alternative), the alternative's
    successes are no evidence against ``good``: inside the condition they are avoided as the
    costlier way, and the condition only says where ``good`` itself works. ``dearer`` (the
    alternative costs clearly less) adds a caveat saying so. A condition with alternatives
    (:mod:`actors.engine.disjunction`) gives one template per alternative.
    """
    good_ok = succeeded[good]
    # A failure the same tool recovered from later in the same trajectory and situation happened
    # in the very snapshot it then worked in: no condition can explain it, so it is no evidence
    # of where either tool is right (a busy server, not the rule). It only says a retry pays.
    bad_fail = [o for b in bads for o in split_recovered(failed.get(b, []), succeeded.get(b, []))[0]]
    # Only calls that fit the generalized pattern count against it: a click on a made-up id is
    # no failure of click("[type=submit]"), set_encoding("utf-8") no success of set_encoding("utf-16").
    good_fail, transient = split_recovered(_fitting(failed.get(good, []), good_ok), good_ok)
    bad_ok = [o for b in bads for o in _fitting(succeeded.get(b, []), failed.get(b, []))]
    learned = _condition(good_ok, bad_fail, good_fail, [] if cheaper else bad_ok, population)
    if cheaper and learned is not None and not any(holds_all(p, o.features) for p in learned[0] for o in bad_ok):
        # Where the cheap action works the other was never seen working: no place where both work,
        # so cost decides nothing here and the other's successes are evidence of where it is right.
        cheaper = dearer = None
        learned = _condition(good_ok, bad_fail, good_fail, bad_ok, population)
    if learned is None:
        return []
    alternatives, strength = learned
    findings = []
    for predicates in alternatives:
        finding = _distil_alternative(
            good,
            bads,
            succeeded,
            failed,
            predicates=predicates,
            strength=strength,
            rule=alternatives if len(alternatives) > 1 else (),
            good_fail=good_fail,
            transient=transient,
            bad_ok=bad_ok,
            cheaper=cheaper,
            dearer=dearer,
        )
        if finding is not None:
            findings.append(finding)
    return findings


def _distil_alternative(
    good: str,
    bads: tuple[str, ...],
    succeeded: dict[str, list[Observation]],
    failed: dict[str, list[Observation]],
    *,
    predicates: tuple[Predicate, ...],
    strength: float,
    rule: Sequence[tuple[Predicate, ...]],
    good_fail: list[Observation],
    transient: list[Observation],
    bad_ok: list[Observation],
    cheaper: CostGap | None,
    dearer: CostGap | None,
) -> Finding | None:
    """The template for one alternative of the condition (``rule``: all of them, when several).

    ``transient``: failures of ``good`` it recovered from in the same situation; they weigh
    nothing against it and count only towards the retry mark.
    """
    decoy = all(b not in succeeded for b in bads)
    good_ok = succeeded[good]
    recommended = [o for o in good_ok if holds_all(predicates, o.features)]
    inside = {b: [o for o in failed.get(b, []) if holds_all(predicates, o.features)] for b in bads}
    costlier = [o for b in bads for o in succeeded.get(b, []) if holds_all(predicates, o.features)] if cheaper else []
    counter = [o for o in good_fail + ([] if cheaper else bad_ok) if holds_all(predicates, o.features)]
    unexplained = sorted(
        (o for o in good_fail + transient if holds_all(predicates, o.features)), key=Observation.sort_key
    )
    # The decoy that failed most often is the one to name; ties go alphabetically.
    ranked = sorted((b for b in bads if inside[b]), key=lambda b: (-len(inside[b]), b))
    if not recommended or not (ranked or costlier):
        return None
    bad, others = (ranked[0], ranked[1:]) if ranked else (bads[0], [])
    avoided = sorted((o for b in ranked for o in inside[b]), key=Observation.sort_key)
    caveats = _caveats(good, predicates, good_fail) + tuple(_also_avoid(b, inside[b]) for b in sorted(others))
    if dearer is not None:
        caveats += (cheaper_caveat(bad, dearer.describe(bad, good)),)
    rationale = _rationale(good, bad, inside[bad])
    if cheaper is not None:
        rationale = _cost_rationale(good, bad, inside[bad], cheaper)
    if rule:
        # Each alternative is a template of its own; its text says the rule is wider than it.
        rationale += f"; {good} is right when {render_alternatives(rule)} (one template per alternative)"
    return _finding(
        recommended,
        avoided,
        counter,
        identity=(good, DECOYS if decoy else bad, predicates),
        condition=predicates,
        rationale=rationale,
        caveats=caveats,
        strength=strength,
        avoid=(bad, inside[bad] + costlier),
        costlier=costlier,
        cost_gap=cheaper,
        retry=worth_retrying(recommended, unexplained),
        unexplained=unexplained,
    )


def worth_retrying(worked: Sequence[Observation], failed: Sequence[Observation]) -> bool:
    """Whether the recommended call's failures where its condition holds look transient.

    ``worked`` and ``failed`` are the call's successes and failures where the condition holds.
    The call is worth one retry when it works in most runs here and, wherever an agent called it
    again in the same trajectory and situation, it recovered at least as often as it kept
    failing: a failure caused by something the snapshot does not show repeats, a transient one
    (a busy server, a dropped connection) does not. With no such repeat seen, most runs working
    is the evidence. (:func:`distil_group` then drops the mark where another rule of the same
    decision explains the failures.)
    """
    if not failed or len(worked) <= len(failed):
        return False
    failures: dict[Place, list[int]] = {}
    for o in failed:
        failures.setdefault(o.place, []).append(o.node.seq)
    last_success = _last_success(worked)
    recovered = kept_failing = 0
    for place, seqs in failures.items():
        if last_success.get(place, -1) > min(seqs):
            recovered += 1
        elif len(seqs) > 1:
            kept_failing += 1
    return recovered >= kept_failing


def split_recovered(
    failed: Sequence[Observation], worked: Sequence[Observation]
) -> tuple[list[Observation], list[Observation]]:
    """The ``failed`` calls no call in ``worked`` recovered from later in the same trajectory and
    situation, and those one did."""
    last_success = _last_success(worked)
    kept: list[Observation] = []
    recovered: list[Observation] = []
    for o in failed:
        (recovered if last_success.get(o.place, -1) > o.node.seq else kept).append(o)
    return kept, recovered


def _last_success(worked: Sequence[Observation]) -> dict[Place, int]:
    """The sequence number of the last success in each place."""
    last: dict[Place, int] = {}
    for o in worked:
        place = o.place
        last[place] = max(last.get(place, -1), o.node.seq)
    return last


def _fitting(calls: Sequence[Observation], pattern_of: Sequence[Observation]) -> list[Observation]:
    """The ``calls`` that are instances of the pattern generalized from ``pattern_of``."""
    if not calls:
        return []
    pattern = _pattern(pattern_of)
    return [o for o in calls if fits_pattern(pattern, o.node.action_params, o.node.context_snapshot)]


def _condition(
    good_ok: list[Observation],
    bad_fail: list[Observation],
    good_fail: list[Observation],
    bad_ok: list[Observation],
    population: Sequence[Features],
) -> tuple[tuple[tuple[Predicate, ...], ...], float] | None:
    """Where the preference holds (alternatives, each a conjunction), with its strength; None when
    no condition explains the outcomes.

    A condition must say where the preference *flips*; without a flip there is none. When only
    the recommended action flipped, the condition separates where it worked from where it
    failed: failures of the avoided tool, seen in any context, say nothing about that and would
    only dilute the real feature (or let a lucky threshold win). When only the avoided action
    flipped, it separates where that one failed from where it worked. When both did, it is the
    conjunction of the two (where the avoided action fails, and where the recommended one
    works: the second predicate, an edge case), judged on all the runs together; when that is
    too imprecise, or the two tools split one feature between them, one rule (or alternatives)
    learned on all the runs together.
    """
    if not good_fail and not bad_ok:
        return ((),), 1.0
    if not bad_ok or not good_fail:
        positive, negative = (good_ok, good_fail) if good_fail else (bad_fail, bad_ok)
        return _rule(positive, negative, population)
    # When the two tools split the situations between them (one works exactly where the other
    # fails) by a rule on two features ("express and over 5 kg"), each half alone learns the same
    # single test, which explains too little: the rule is found on the runs taken together.
    halves = _halves(good_ok, bad_fail, good_fail, bad_ok, population)
    if halves is not None:
        return halves
    together = learn_condition(
        [o.features for o in good_ok + bad_fail], [o.features for o in good_fail + bad_ok], population=population
    )
    if together is None or together.precision < MIN_PRECISION:
        return None
    return (together.predicates,), max(0.0, together.strength)


def _rule(
    positive: Sequence[Observation], negative: Sequence[Observation], population: Sequence[Features]
) -> tuple[tuple[tuple[Predicate, ...], ...], float] | None:
    """The alternatives separating ``positive`` from ``negative``, with their strength (None: too imprecise)."""
    learned = learn_disjunction([o.features for o in positive], [o.features for o in negative], population=population)
    if learned is None or learned.precision < MIN_PRECISION:
        return None
    return learned.alternatives, max(0.0, learned.strength)


def _halves(
    good_ok: list[Observation],
    bad_fail: list[Observation],
    good_fail: list[Observation],
    bad_ok: list[Observation],
    population: Sequence[Features],
) -> tuple[tuple[tuple[Predicate, ...], ...], float] | None:
    """Where the avoided tool fails and where the recommended one works, joined (None: too imprecise)."""
    where_bad_fails = learn_condition(
        [o.features for o in bad_fail], [o.features for o in bad_ok], max_tests=1, population=population
    )
    where_good_works = learn_condition(
        [o.features for o in good_ok], [o.features for o in good_fail], max_tests=1, population=population
    )
    if where_bad_fails is None or where_good_works is None:
        return None
    one_feature = {p.feature for p in where_bad_fails.predicates} == {p.feature for p in where_good_works.predicates}
    if one_feature and not any(holds_all(where_bad_fails.predicates, o.features) for o in good_fail):
        # Two tools that split one feature between them (neither failed where the other does):
        # one rule, found on the runs together. The half where the avoided tool failed would put
        # its bound midway across a gap the recommended tool's successes fill (it worked at 61,
        # the other failed up to 19 and worked from 80: the bound is not 49).
        return None
    # Both halves may test one feature ({a, b, c} and {a, b}): keep only what separates something.
    runs = [o.features for o in good_ok + bad_fail + good_fail + bad_ok]
    predicates = simplify(where_bad_fails.predicates + where_good_works.predicates, runs)
    held = [o for o in good_ok + bad_fail if holds_all(predicates, o.features)]
    broken = [o for o in good_fail + bad_ok if holds_all(predicates, o.features)]
    if not held or len(held) < MIN_PRECISION * (len(held) + len(broken)):
        return None
    strength = len(held) / len(good_ok + bad_fail) - len(broken) / len(good_fail + bad_ok)
    return (predicates,), max(0.0, strength)


def _also_avoid(tool: str, failures: Sequence[Observation]) -> str:
    return also_avoid(tool, _common_summary(failures))


def also_avoid(tool: str, reason: str | None) -> str:
    """The caveat naming a further decoy; stable text (no counts), so seeing it again adds nothing."""
    return f"{ALSO_AVOID}{tool}: it failed here too" + (f" ({reason})" if reason else "")


def also_avoided(caveat: str) -> str | None:
    """The decoy an ``also avoid`` caveat names (None for any other caveat)."""
    if not caveat.startswith(ALSO_AVOID):
        return None
    return caveat[len(ALSO_AVOID) :].split(":", 1)[0]


def caveat_key(caveat: str) -> str:
    """What a caveat is about, without the run-specific values it lists.

    ``also avoid X: …`` → ``avoid X``; ``T failed when F was 1 or 2; requires F > 3`` → ``T failed
    when F``; anything else is its own key. Two caveats with one key say the same thing.
    """
    decoy = also_avoided(caveat)
    if decoy is not None:
        return "avoid " + decoy
    if caveat.startswith(CHEAPER_WHERE):
        return caveat.split(":", 1)[0]  # the figures move from batch to batch; the point does not
    head, sep, _ = caveat.partition(" was ")
    return head if sep and " failed when " in head and "; requires " in caveat else caveat


def cheaper_caveat(tool: str, comparison: str) -> str:
    """The caveat of a template whose avoided tool is the cheaper one where it works."""
    return f"{CHEAPER_WHERE}{tool} works it is the cheaper choice: {comparison}"


def failure_reason(template: ExperienceTemplate) -> str | None:
    """The avoided tool's most common failure, as :func:`_rationale` wrote it (None if absent)."""
    if template.avoid is None:
        return None
    marker = f"; {template.avoid.tool} failed with: "
    return template.rationale.split(marker, 1)[1] if marker in template.rationale else None


def _distil_params(tool: str, ok: Sequence[Observation], fail: Sequence[Observation]) -> Finding | None:
    """Same tool, different outcome: is one parameter value the difference?

    Only plain categorical parameters (short strings or CSS selectors without paths, ids or URLs;
    booleans) are considered, and exactly one must separate perfectly: every success used the
    same value and no failure did, and the calls differ in it as generalized (not a value each
    read off its own situation). With several candidates the evidence cannot say which one mattered.
    """
    ok_flat = [flatten_context(o.node.action_params, "params") for o in ok]
    fail_flat = [flatten_context(o.node.action_params, "params") for o in fail]
    candidates = []
    for feature in sorted(set(ok_flat[0]).intersection(*ok_flat[1:])):
        values = {f[feature] for f in ok_flat}
        if len(values) != 1:
            continue
        value = values.pop()
        usable = isinstance(value, bool) or (isinstance(value, str) and string_kind(feature, value) in CONSTANT_KINDS)
        if usable and all(f.get(feature, None) != value for f in fail_flat):
            candidates.append(Predicate(feature=feature, op="==", value=value))
    if candidates:
        # As generalized (one notion of fits), a value each call read off its own situation is no
        # difference. Generalizing costs, so only once a candidate is found.
        ok_pattern = flatten_context(_pattern(ok), "params")
        fail_pattern = flatten_context(_pattern(fail), "params")
        candidates = [
            c for c in candidates if c.feature not in ok_pattern or ok_pattern[c.feature] != fail_pattern.get(c.feature)
        ]
    if len(candidates) != 1:
        return None
    (pred,) = candidates
    bad_values = sorted({repr(f[pred.feature]) for f in fail_flat if pred.feature in f}) or ["absent"]
    # No run counts in the text: it is written once, while support grows with every merge (the
    # template's support says how many).
    rationale = (
        f"{tool} succeeded with {pred.feature[len('params.') :]} = {pred.value!r} "
        f"and failed with {' or '.join(bad_values)}"
    )
    return _finding(ok, fail, (), identity=(tool, tool, (pred,)), condition=(), rationale=rationale, caveats=())


def _finding(
    recommended: Sequence[Observation],
    avoided: Sequence[Observation],
    counter: Sequence[Observation],
    *,
    identity: tuple[str, str, Sequence[Predicate]],
    condition: tuple[Predicate, ...],
    rationale: str,
    caveats: tuple[str, ...],
    strength: float = 1.0,
    avoid: tuple[str, Sequence[Observation]] | None = None,
    costlier: Sequence[Observation] = (),
    cost_gap: CostGap | None = None,
    retry: bool = False,
    unexplained: Sequence[Observation] = (),
) -> Finding:
    good, bad, id_predicates = identity
    avoid_tool, avoid_obs = avoid or (bad, avoided)
    # The outcomes' signs chose the evidence; how far a score sits from zero is the scorer's
    # blend of later events, no measure of how well this contrast separates.
    if not avoided and cost_gap is not None:
        # Nothing failed: the contrast is as strong as the cost difference (3× → 0.67).
        strength *= 1.0 - 1.0 / cost_gap.ratio
    belief = evidence_belief(len(recommended) + len(avoided) + len(costlier), len(counter), strength)
    sample = recommended[0]
    key = sample.key
    evidence = sorted([*recommended, *avoided, *costlier], key=Observation.sort_key)
    provenance = [_prov(o, EvidenceKind.RECOMMENDED_SUCCEEDED) for o in recommended]
    provenance += [_prov(o, EvidenceKind.AVOIDED_FAILED) for o in avoided]
    provenance += [_prov(o, EvidenceKind.AVOIDED_COSTLIER) for o in costlier]
    provenance += [_prov(o, EvidenceKind.COUNTER) for o in counter]
    template = ExperienceTemplate(
        template_id=template_id(key, good, bad, id_predicates),
        role=sample.signature.role,
        task_type=sample.signature.task_type,
        signature=key,
        condition=Condition(predicates=condition),
        recommended=ActionPattern(tool=good, params=_pattern(recommended)),
        avoid=ActionPattern(tool=avoid_tool, params=_pattern(avoid_obs)),
        rationale=rationale,
        caveats=caveats,
        retry=retry,
        tested=tested_ranges(condition, recommended),
        cost_ratio=cost_gap.ratio if costlier and cost_gap and 1.0 < cost_gap.ratio < math.inf else None,
        provenance=tuple(provenance),
        support=Support(
            successes=len(recommended),
            failures=len(avoided),
            trajectories=len({o.trajectory.trajectory_id for o in evidence}),
        ),
        belief=belief,
        confidence=confidence_of(belief),
        created_at=_latest(evidence),
        updated_at=_latest(evidence),
    )
    contrasts = tuple(pair_contrasts(recommended, avoided))
    return Finding(template=template, evidence=tuple(evidence), contrasts=contrasts, unexplained=tuple(unexplained))


def tested_ranges(predicates: Sequence[Predicate], worked: Sequence[Observation]) -> dict[str, tuple[float, float]]:
    """Per numeric feature ``predicates`` test, the lowest and highest value where ``worked`` ran."""
    out: dict[str, tuple[float, float]] = {}
    for feature in dict.fromkeys(p.feature for p in predicates if p.op in ("<", "<=", ">", ">=")):
        values = [float(v) for o in worked if is_number(v := o.features.get(feature))]
        if values:
            out[feature] = (min(values), max(values))
    return out


def _prov(obs: Observation, kind: EvidenceKind) -> Provenance:
    return Provenance(trajectory_id=obs.trajectory.trajectory_id, node_ids=(obs.node.node_id,), kind=kind)


def _pattern(observations: Sequence[Observation]) -> dict[str, JsonValue]:
    return generalize_params(
        [(o.node.action_params, o.node.context_snapshot) for o in observations], [o.features for o in observations]
    )


def _latest(observations: Sequence[Observation]) -> datetime:
    return max(o.trajectory.finalized_at or o.trajectory.created_at for o in observations)


def _rationale(good: str, bad: str, avoided: Sequence[Observation]) -> str:
    # No run counts in the text: it is written once, while support grows with every merge.
    text = f"In this situation {good} succeeded and {bad} failed"
    common = _common_summary(avoided)
    if common:
        text += f"; {bad} failed with: {common}"
    return text


def _cost_rationale(good: str, bad: str, failed: Sequence[Observation], gap: CostGap) -> str:
    text = f"Both work: {good} and {bad}"
    text += f"; {gap.describe(good, bad)}"
    if failed:
        text += f"; {bad} also failed in some runs"
        common = _common_summary(failed)
        if common:
            text += f"; {bad} failed with: {common}"
    return text


def _summary(obs: Observation) -> str | None:
    """The one-line outcome: ``summary``, else an ``error`` or ``message`` the agent sent in ``data``."""
    result = obs.node.execution_result
    if result.summary:
        return result.summary
    for key in ("error", "message"):
        value = result.data.get(key)
        if isinstance(value, dict):
            value = value.get("message")
        if isinstance(value, str) and value.strip():
            return value
    return None


def _common_summary(observations: Sequence[Observation]) -> str | None:
    summaries = Counter(sanitize_text(text) for o in observations if (text := _summary(o)))
    # Most common first; ties broken alphabetically so the text is deterministic.
    return sorted(summaries.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] if summaries else None


def _caveats(good: str, predicates: Sequence[Predicate], good_fail: Sequence[Observation]) -> tuple[str, ...]:
    """Refining predicates that ruled out failures of the recommended tool are edge cases worth saying."""
    caveats = []
    for pred in predicates[1:]:
        excluded = [o for o in good_fail if not holds(pred, o.features)]
        values = sorted({repr(o.features[pred.feature]) for o in excluded if pred.feature in o.features})
        if values:
            caveats.append(f"{good} failed when {pred.feature} was {' or '.join(values)}; requires {pred.render()}")
    return tuple(caveats)
