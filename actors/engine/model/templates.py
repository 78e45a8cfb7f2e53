"""Experience templates: generalized, structured rules distilled from attributed decisions.

A template says *when* (condition), *do what* (recommended action pattern), *not what* (action
to avoid) and *why* (rationale, caveats), with the evidence behind it (provenance, support) and a
confidence that moves with outcome feedback.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Literal, Self

from pydantic import Field, JsonValue, field_validator, model_validator

from cluster.core.types import Frozen, JsonObject, Name, Text, utcnow

# One served line stays near 70 tokens: five of them and the markers fit in 2 KB.
BRIEF_CHARS = 320

RETRY_NOTE = "it fails now and then for no reason the situation shows: if it fails, retry it once"

Operator = Literal[">", ">=", "<", "<=", "==", "!=", "in", "contains"]


class Predicate(Frozen):
    """One test on a context feature, e.g. ``row_count > 100`` or ``region in {'eu', 'uk'}``.

    ``in`` takes a non-empty list of JSON scalars (the feature equals one of them); the other
    operators take one value. A band ``20 < rows <= 100`` is two predicates on one feature.
    """

    feature: Name = Field(description="Dotted path into the context snapshot, e.g. 'table.row_count'.")
    op: Operator
    value: JsonValue

    @model_validator(mode="after")
    def _set_for_in(self) -> Self:
        if self.op == "in" and not (
            isinstance(self.value, list)
            and self.value
            and all(v is None or isinstance(v, str | int | float | bool) for v in self.value)
        ):
            raise ValueError("'in' needs a non-empty list of scalar values, e.g. ['eu', 'uk']")
        return self

    def __hash__(self) -> int:
        # Frozen models hash their fields, and an ``in`` list is not hashable; its JSON text is.
        return hash((self.feature, self.op, json.dumps(self.value, sort_keys=True)))

    def render(self) -> str:
        return render_predicate(self.feature, self.op, self.value)


def render_predicate(feature: str, op: str, value: JsonValue) -> str:
    """A predicate as text (:meth:`Predicate.render`), from its parts."""
    if op == "in" and isinstance(value, list):
        return f"{feature} in {{{', '.join(_render_scalar(v) for v in value)}}}"
    return f"{feature} {op} {_render_scalar(value)}"


def _render_scalar(value: JsonValue) -> str:
    return repr(value) if isinstance(value, str) else str(value)


_LOWER = (">", ">=")
_UPPER = ("<", "<=")
_FLIP = {">": "<", ">=": "<="}


class Condition(Frozen):
    """When a template applies: every predicate must hold (an empty list always holds)."""

    predicates: tuple[Predicate, ...] = ()
    description: Text = Field(default="", max_length=1000, description="The condition in words.")

    def render(self) -> str:
        """The description, or the predicates joined by ``and``; a lower and an upper bound on one
        feature read as a band, ``20 < rows <= 100``. Empty when the condition always holds."""
        if self.description:
            return self.description
        lower: dict[str, list[Predicate]] = {}
        upper: dict[str, list[Predicate]] = {}
        for p in self.predicates:
            (lower if p.op in _LOWER else upper if p.op in _UPPER else {}).setdefault(p.feature, []).append(p)
        parts: list[str] = []
        done: set[str] = set()
        for p in self.predicates:
            lo, hi = lower.get(p.feature, []), upper.get(p.feature, [])
            if len(lo) == 1 and len(hi) == 1 and p.op in _LOWER + _UPPER:
                if p.feature not in done:
                    done.add(p.feature)
                    low, high = _render_scalar(lo[0].value), _render_scalar(hi[0].value)
                    parts.append(f"{low} {_FLIP[lo[0].op]} {p.feature} {hi[0].op} {high}")
                continue
            parts.append(p.render())
        return " and ".join(parts)


class ActionPattern(Frozen):
    """A tool call with concrete values generalized to placeholders or patterns."""

    tool: Name
    params: JsonObject = Field(default_factory=dict)

    def render(self) -> str:
        args = ", ".join(f"{k}={_render_value(v)}" for k, v in sorted(self.params.items()))
        return f"{self.tool}({args})"


def _render_value(value: JsonValue) -> str:
    if isinstance(value, str):
        # Placeholders like <csv_path> read better bare than quoted.
        return value if value.startswith("<") and value.endswith(">") else f'"{value}"'
    return str(value)


class EvidenceKind(StrEnum):
    """What a piece of evidence says about a template."""

    RECOMMENDED_SUCCEEDED = "recommended_succeeded"
    AVOIDED_FAILED = "avoided_failed"
    AVOIDED_COSTLIER = "avoided_costlier"
    """The avoided choice worked too, at a higher cost (steps, latency or tokens)."""
    COUNTER = "counter"


class Provenance(Frozen):
    """Where a template's evidence came from: real trajectory and node ids.

    ``kind`` lets a merge recount support from the union of provenance, so merging the same
    evidence twice (a retried batch) does not inflate support. It is optional for hand-written
    and imported templates.
    """

    trajectory_id: uuid.UUID
    node_ids: tuple[uuid.UUID, ...] = ()
    kind: EvidenceKind | None = None


class Support(Frozen):
    """How much evidence stands behind a template."""

    successes: int = Field(default=0, ge=0, description="Runs where the recommended choice succeeded.")
    failures: int = Field(default=0, ge=0, description="Runs where the avoided choice failed.")
    trajectories: int = Field(default=0, ge=0, description="Distinct trajectories contributing evidence.")


class Belief(Frozen):
    """The evidence behind an attribution template's confidence, as a Beta posterior's counts.

    ``agree`` and ``disagree`` come from the runs the template was distilled from (weighted by how
    cleanly its condition separates them); ``served_ok`` and ``served_failed`` count the outcomes
    agents reported after it was served. Each is carried through merges and library rebuilds, so
    nothing an agent reported is forgotten (:mod:`actors.engine.confidence`).
    """

    agree: float = Field(default=0.0, ge=0.0, description="Evidence runs that support the template.")
    disagree: float = Field(default=0.0, ge=0.0, description="Evidence runs inside its condition against it.")
    served_ok: int = Field(default=0, ge=0, description="Served, applied, and the task succeeded.")
    served_failed: int = Field(default=0, ge=0, description="Served, applied, and the task failed.")


class TemplateSource(StrEnum):
    ATTRIBUTION = "attribution"
    MANUAL = "manual"
    IMPORT = "import"


class ExperienceTemplate(Frozen):
    """A reusable experience, ready to be served to an agent facing a similar decision."""

    template_id: uuid.UUID = Field(default_factory=uuid.uuid4)
    role: Name = "agent"
    task_type: Name | None = None
    signature: Text = Field(default="", max_length=500, description="The decision signature it came from.")
    condition: Condition = Field(default_factory=Condition)
    recommended: ActionPattern
    avoid: ActionPattern | None = None
    rationale: Text = Field(default="", max_length=2000)
    caveats: tuple[Text, ...] = ()
    provenance: tuple[Provenance, ...] = ()
    support: Support = Field(default_factory=Support)
    confidence: float = Field(default=0.5, ge=0.0, le=1.0)
    belief: Belief | None = Field(
        default=None,
        description="What the confidence was computed from; None where it was set by hand (or imported).",
    )
    parent_id: uuid.UUID | None = Field(default=None, description="Set on a supplementary (edge-case) template.")
    retry: bool = Field(
        default=False,
        description="The recommended call failed now and then where the condition holds, for no reason the "
        "situation shows, and works in most runs: after a failure, retry it once before switching.",
    )
    tested: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description="Per numeric feature the condition tests, the lowest and highest value where the "
        "recommended call was seen to work. Past them, toward a bound, the condition is the learner's guess "
        "(a bound sits midway to the nearest failure).",
    )
    cost_ratio: float | None = Field(
        default=None,
        gt=1.0,
        description="Set where the avoided call works too but costs more: how many times this call's cost "
        "it costs (medians, on the metric that shows the gap best). The advice is then a cheap bet: if this "
        "call fails, the costlier one still works.",
    )
    source: TemplateSource = TemplateSource.ATTRIBUTION
    retired_reason: Text | None = Field(
        default=None,
        max_length=500,
        description="Set when later evidence contradicted the template: it is kept, but never served.",
    )
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @field_validator("tested")
    @classmethod
    def _ranges(cls, value: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        for feature, (low, high) in value.items():
            if not (math.isfinite(low) and math.isfinite(high) and low <= high):
                raise ValueError(f"tested[{feature!r}] must be [lowest, highest] finite numbers, got [{low}, {high}]")
        return value

    @property
    def avoid_reason(self) -> Literal["fails", "costlier"] | None:
        """Why ``avoid``: it fails here, or it works here too but costs more (None: nothing to avoid).

        An agent whose recommended call failed should fall back on a costlier alternative first.
        """
        if self.avoid is None:
            return None
        return "costlier" if any(p.kind is EvidenceKind.AVOIDED_COSTLIER for p in self.provenance) else "fails"

    def render(self) -> str:
        """Deterministic natural-language form of the template."""
        when = self.condition.render()
        parts = [f"When {when}, prefer {self.recommended.render()}" if when else f"Prefer {self.recommended.render()}"]
        if self.retry:
            # In the first sentence, so a line cut for the prompt block still says it.
            parts.append(f" ({RETRY_NOTE})")
        if self.avoid is not None:
            parts.append(f"; avoid {self.avoid.render()}")
        text = "".join(parts) + "."
        if self.rationale:
            text += f" {self.rationale.rstrip('.')}."
        for caveat in self.caveats:
            text += f" Caveat: {caveat.rstrip('.')}."
        return text

    def brief(self, max_chars: int = BRIEF_CHARS) -> str:
        """:meth:`render` on one line, cut at a sentence (or word) boundary to at most ``max_chars``."""
        text = " ".join(self.render().split())
        if len(text) <= max_chars:
            return text
        cut = text.rfind(". ", 0, max_chars)
        if cut < max_chars // 2:
            cut = text.rfind(" ", 0, max_chars - 1)
            return text[:cut].rstrip(" ,;") + "…"
        return text[: cut + 1]


def render_prompt_block(templates: list[ExperienceTemplate], *, full: bool = False, notes: Sequence[str] = ()) -> str:
    """The block to put in a system prompt, before the tool descriptions. Empty list → empty string.

    Each line is the template's :meth:`~ExperienceTemplate.brief` (``full``: its whole rendering)
    and its confidence: the block is read by a model on every decision, so it stays short.
    ``notes`` are lines after the templates (never alone: they need a template to stand beside).
    """
    if not templates:
        return ""
    lines = ["[EXPERIENCE]"]
    for i, template in enumerate(templates, 1):
        text = template.render() if full else template.brief()
        lines.append(f"{i}. {text} (confidence {template.confidence:.2f})")
    lines += notes
    lines.append("[/EXPERIENCE]")
    return "\n".join(lines)
