"""Nearness: a value no condition was learned on, read as the nearest value one was.

A condition learned as ``focus in {'black blanket', 'plaid blanket'}`` is false for ``"brown
duvet"``, a thing the learner never saw, although the lesson is about it too. At serving time,
for each text feature of the situation whose value no candidate template's condition names
(``==``, ``!=`` or ``in``, on that feature), the value named there that is nearest by the
service's embedder stands in for it when the cosine is at least the threshold
(``Settings.value_nearness``). One stand-in per feature, the nearest, so that two templates
learned on different values are not both made to hold; a value some condition names is never
replaced (there is evidence about it itself). The answer shows each stand-in a template's
condition used: ``focus: brown duvet ≈ black blanket 0.81``.

The engine's condition evaluation is unchanged: it judges the situation with the stand-ins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import JsonValue

from actors.engine.features import Features
from actors.engine.model.templates import ExperienceTemplate
from cluster.core.ports import Embedder

CATEGORICAL_OPS = frozenset({"==", "!=", "in"})
NEARNESS_DEFAULT = 0.75
"""The default threshold, chosen on TextWorldExpress's train fold alone (docs/benchmarks.md)."""


@dataclass(frozen=True, slots=True)
class StandIn:
    """A situation value read as a value some condition names."""

    feature: str
    value: str
    near: str
    similarity: float

    def render(self) -> str:
        return f"{self.feature}: {self.value} ≈ {self.near} {self.similarity:.2f}"


def named_values(templates: Sequence[ExperienceTemplate]) -> dict[str, set[str]]:
    """Per feature, the text values the templates' conditions name (``==``, ``!=``, ``in``)."""
    out: dict[str, set[str]] = {}
    for template in templates:
        for p in template.condition.predicates:
            if p.op not in CATEGORICAL_OPS:
                continue
            values = p.value if isinstance(p.value, list) else [p.value]
            out.setdefault(p.feature, set()).update(v for v in values if isinstance(v, str))
    return out


def stand_ins(
    embedder: Embedder, templates: Sequence[ExperienceTemplate], features: Features, threshold: float
) -> list[StandIn]:
    """The stand-ins for the situation's unnamed text values (module docstring), one per feature at most."""
    named = named_values(templates)
    unseen = {f: v for f, v in features.items() if isinstance(v, str) and v and f in named and v not in named[f]}
    if not unseen:
        return []
    texts = sorted({*unseen.values(), *(n for f in unseen for n in named[f])})
    vectors = dict(zip(texts, embedder.embed(texts), strict=True))
    out = []
    for feature, value in sorted(unseen.items()):
        best = max(
            ((sum(a * b for a, b in zip(vectors[value], vectors[n], strict=True)), n) for n in sorted(named[feature])),
            key=lambda pair: pair[0],
        )
        if best[0] >= threshold:
            out.append(StandIn(feature=feature, value=value, near=best[1], similarity=round(best[0], 2)))
    return out


def substituted(
    features: Features, snapshot: Mapping[str, JsonValue], found: Sequence[StandIn]
) -> tuple[dict[str, JsonValue], Features]:
    """The snapshot and features with each stand-in in place of the value it stands for."""
    feats = dict(features)
    snap = dict(snapshot)
    for s in found:
        feats[s.feature] = s.near
        if snap.get(s.feature) == s.value:
            snap[s.feature] = s.near
    return snap, feats


def used_by(template: ExperienceTemplate, found: Sequence[StandIn]) -> str | None:
    """The stand-ins ``template``'s condition reads, rendered (None: none)."""
    features = {p.feature for p in template.condition.predicates}
    used = [s.render() for s in found if s.feature in features]
    return "; ".join(used) or None
