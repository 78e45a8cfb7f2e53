"""Experience templates: generalized, structured rules distilled from attributed decisions.

A template says *when* (condition), *do what* (recommended action pattern), *not what* (action
to avoid) and *why* (rationale, caveats), with the evidence behind it (provenance, support) and a
confidence that moves with outcome feedback.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field, JsonValue

from cluster.core.types import Frozen, JsonObject, Name, Text, utcnow

# One served line stays near 70 tokens: five of them and the markers fit in 2 KB.
BRIEF_CHARS = 320

Operator = Literal[">", ">=", "<", "<=", "==", "!=", "in", "contains"]


class Predicate(Frozen):
    """One test on a context feature, e.g. ``row_count > 100``."""

    feature: Name = Field(description="Dotted path into the context snapshot, e.g. 'table.row_count'.")
    op: Operator
    value: JsonValue

    def render(self) -> str:
        return (
            f"{self.feature} {self.op} {self.value!r}"
            if isinstance(self.value, str)
            else (f"{self.feature} {self.op} {self.value}")
        )


class Condition(Frozen):
    """When a template applies: every predicate must hold (an empty list always holds)."""

    predicates: tuple[Predicate, ...] = ()
    description: Text = Field(default="", max_length=1000, description="The condition in words.")


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
    parent_id: uuid.UUID | None = Field(default=None, description="Set on a supplementary (edge-case) template.")
    source: TemplateSource = TemplateSource.ATTRIBUTION
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    def condition_text(self) -> str:
        """The condition in words; empty when the template always applies."""
        return self.condition.description or " and ".join(p.render() for p in self.condition.predicates)

    def render(self) -> str:
        """Deterministic natural-language form of the template."""
        when = self.condition_text()
        parts = [f"When {when}, prefer {self.recommended.render()}" if when else f"Prefer {self.recommended.render()}"]
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


def render_prompt_block(templates: list[ExperienceTemplate], *, full: bool = False) -> str:
    """The block to put in a system prompt, before the tool descriptions. Empty list → empty string.

    Each line is the template's :meth:`~ExperienceTemplate.brief` (``full``: its whole rendering)
    and its confidence: the block is read by a model on every decision, so it stays short.
    """
    if not templates:
        return ""
    lines = ["[EXPERIENCE]"]
    for i, template in enumerate(templates, 1):
        text = template.render() if full else template.brief()
        lines.append(f"{i}. {text} (confidence {template.confidence:.2f})")
    lines.append("[/EXPERIENCE]")
    return "\n".join(lines)
