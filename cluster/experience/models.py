"""Pydantic models at the experience service's boundary: query results, feedback, reports, edits."""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, model_validator

from actors.engine.model.templates import ActionPattern, Condition, ExperienceTemplate
from cluster.core.types import Frozen, JsonObject, Name, Text

MAX_TOP_K = 8


class RoleLibraries(Frozen):
    """Which roles learn into one library and are served from it (the ``shared_roles`` setting).

    ``shared`` maps a library's name to the roles that share it, e.g. ``{"executor": ["executor-eu",
    "executor-us"]}``: trajectories of those roles are learned from as role ``executor`` (their
    evidence pools; the templates carry that role), and an agent of any of them, or of role
    ``executor`` itself, is served that library. A role named nowhere keeps a library of its own.
    """

    shared: dict[Name, tuple[Name, ...]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_library_per_role(self) -> RoleLibraries:
        seen: dict[str, str] = {}
        for library, roles in self.shared.items():
            if not roles:
                raise ValueError(f"shared_roles[{library!r}] lists no role")
            for role in roles:
                if role in self.shared and role != library:
                    raise ValueError(f"role {role!r} is itself a shared library's name; list it once")
                if role in seen and seen[role] != library:
                    raise ValueError(f"role {role!r} is in two shared libraries: {seen[role]!r} and {library!r}")
                seen[role] = library
        return self

    def library(self, role: str) -> str:
        """The role whose library ``role`` learns into and is served from."""
        for library, roles in self.shared.items():
            if role == library or role in roles:
                return library
        return role

    def served_roles(self, role: str) -> tuple[str, ...]:
        """The template roles an agent of ``role`` is served: its library's, and those its members
        learned before they shared it (until a rebuild relearns them under the library's role)."""
        library = self.library(role)
        return tuple(sorted({library, *self.shared.get(library, ())}))


class Situation(Frozen):
    """The decision an agent faces, in structure: what it sees and what it can do now.

    Sent with a query, it lets the service check each template's learned condition against the
    snapshot and keep templates for this decision only.
    """

    context_snapshot: JsonObject = Field(default_factory=dict, description="What the agent sees now (JSON object).")
    available_actions: tuple[Name, ...] = Field(default=(), max_length=200, description="Actions it can take now.")
    decision: Name | None = Field(default=None, description="Optional name of the decision or step.")

    @property
    def is_empty(self) -> bool:
        return not self.context_snapshot and not self.available_actions and self.decision is None


class ScoredTemplate(Frozen):
    template: ExperienceTemplate
    relevance: float = Field(description="Cosine similarity of the query context and the template, in [-1, 1].")
    applicable: bool | None = Field(
        default=None,
        description="True: the condition holds in the situation sent; None: unknown (no situation, or a "
        "feature it tests is missing); False: served only with include_inapplicable.",
    )
    score: float = Field(default=0.0, description="The ranking score (see cluster.experience.ranking).")


class ServedExperience(Frozen):
    """One template as an agent reads it by default: the rule, not its evidence."""

    id: uuid.UUID = Field(description="Pass it to finalize_trajectory's served_template_ids.")
    condition: str = Field(description="When it applies, rendered; empty means always.")
    recommended: ActionPattern
    avoid: ActionPattern | None = None
    avoid_reason: Literal["fails", "costlier"] | None = Field(
        default=None, description="fails: it fails here; costlier: it works too but costs more."
    )
    confidence: float
    applicable: bool | None = None
    retry: bool = Field(default=False, description="True: if the recommended call fails, retry it once first.")
    text: str = Field(description="The rule in one line.")
    near: str | None = Field(
        default=None,
        description="The condition held by nearness: a value of the situation that no condition names, read as "
        "the nearest one that does, with their cosine, e.g. 'focus: brown duvet ≈ black blanket 0.81'.",
    )


MAX_CANDIDATES = 3


class Candidate(Frozen):
    """A template that would be served here but for its confidence."""

    id: uuid.UUID = Field(description="Pass it to finalize_trajectory's served_template_ids if you follow it.")
    recommended: Name = Field(description="The tool it recommends.")
    avoid: Name | None = Field(default=None, description="The tool it says to avoid.")
    confidence: float

    def brief(self) -> str:
        """The advice in a few words, e.g. ``prefer bulk_import over add_item (0.69)``."""
        advice = f"prefer {self.recommended}" + (f" over {self.avoid}" if self.avoid else "")
        return f"{advice} ({_below(self.confidence)})"


class BelowThreshold(Frozen):
    """When no template passes the confidence threshold: the ones nearest to being served, most confident first."""

    threshold: float = Field(ge=0.0, le=1.0)
    candidates: tuple[Candidate, ...] = Field(min_length=1, max_length=MAX_CANDIDATES)

    def line(self) -> str:
        """One line for the text answer: ``1 candidate below 0.70: prefer bulk_import over add_item (0.69)``."""
        n = len(self.candidates)
        listed = "; ".join(c.brief() for c in self.candidates)
        return f"{n} candidate{'s' if n > 1 else ''} below {self.threshold:.2f}: {listed}"


def _below(confidence: float) -> str:
    # Cut, not rounded: 0.699 shown as 0.70 would read as passing a 0.70 threshold.
    return f"{math.floor(confidence * 100) / 100:.2f}"


class ExperienceQueryResult(Frozen):
    """Templates for one situation, best first, and the block to put in a system prompt.

    ``experiences`` is the lean view an agent reads; ``templates`` holds the full templates with
    their provenance and support (the MCP tool sends them only with ``detail``). ``below_threshold``
    is there only when nothing was served and some template missed the threshold alone.
    """

    experiences: tuple[ServedExperience, ...] = ()
    templates: tuple[ScoredTemplate, ...] = ()
    prompt_block: str = Field(default="", description="[EXPERIENCE]…[/EXPERIENCE], or empty when nothing matched.")
    below_threshold: BelowThreshold | None = Field(
        default=None,
        # Left out of the answer when absent: every served answer would otherwise pay for the key.
        exclude_if=lambda value: value is None,
        description="Nothing passed the confidence threshold: the nearest templates below it.",
    )
    never_worked: tuple[str, ...] = Field(
        default=(),
        exclude_if=lambda value: not value,
        description="Actions that failed each time they were tried at this decision and never worked.",
    )

    def never_worked_line(self) -> str:
        """The one line naming ``never_worked`` (empty when there is none)."""
        if not self.never_worked:
            return ""
        return f"Never worked at this step (failed each time it was tried): {', '.join(self.never_worked)}."

    def lean(self) -> ExperienceQueryResult:
        """The same answer without the full templates."""
        return self.model_copy(update={"templates": ()})


class ConfidenceReason(StrEnum):
    CREATED = "created"
    MERGED = "merged"
    SUCCESS = "success"
    FAILURE = "failure"
    MANUAL = "manual"
    IMPORTED = "imported"
    CARRIED = "carried"
    """Outcomes reported about the rule in the library version this one replaced, taken along."""


class ConfidenceChange(Frozen):
    """One entry of a template's confidence history."""

    template_id: uuid.UUID
    before: float | None = Field(description="None when the template was created.")
    after: float
    reason: ConfidenceReason
    trajectory_id: uuid.UUID | None = None
    at: datetime


class OutcomeReport(Frozen):
    changes: tuple[ConfidenceChange, ...] = ()
    already_counted: tuple[uuid.UUID, ...] = Field(
        default=(), description="Templates whose outcome for this trajectory was reported before (no change)."
    )


class LearnReport(Frozen):
    new: tuple[uuid.UUID, ...] = ()
    merged: tuple[uuid.UUID, ...] = Field(default=(), description="Existing templates that absorbed new evidence.")
    supplementary: tuple[uuid.UUID, ...] = Field(default=(), description="New edge-case templates with a parent.")
    retired: tuple[uuid.UUID, ...] = Field(
        default=(), description="Templates later evidence contradicted: kept with their reason, no longer served."
    )


class ImportReport(Frozen):
    imported: tuple[uuid.UUID, ...] = ()
    merged: tuple[uuid.UUID, ...] = Field(default=(), description="Existing templates the import merged into.")
    duplicates: int = Field(default=0, ge=0, description="Lines skipped because the library already had them.")


TopK = Annotated[int, Field(ge=1)]


class TemplateEdit(Frozen):
    """A hand edit: fields left as None keep their value. Setting ``confidence`` is recorded in the history."""

    role: Name | None = None
    task_type: Name | None = None
    condition: Condition | None = None
    recommended: ActionPattern | None = None
    avoid: ActionPattern | None = None
    clear_avoid: bool = Field(default=False, description="Remove the action to avoid.")
    rationale: Text | None = Field(default=None, max_length=2000)
    caveats: tuple[Text, ...] | None = None
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)


def embedding_text(template: ExperienceTemplate) -> str:
    """What gets embedded for a template: its task type and rendered rule."""
    text = template.render()
    return f"{template.task_type}: {text}" if template.task_type else text


def content_hash(template: ExperienceTemplate) -> str:
    """Hash of what a template says (not its id, evidence or confidence): equal hash = same rule."""
    content = template.model_dump(
        mode="json",
        include={"role", "task_type", "signature", "condition", "recommended", "avoid", "rationale", "caveats"},
    )
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# --- library versions ---------------------------------------------------------------------------


class LibrarySource(StrEnum):
    """How a library version was made."""

    LIVE = "live"
    """The library live learning started in (an owner's first version)."""
    REPROCESS = "reprocess"
    """Built by a reprocess run (``hindsight reprocess --new-version``)."""
    IMPORT = "import"
    """Built from an exchange file (``hindsight library import``)."""
    CONSOLIDATE = "consolidate"
    """Built by a scheduled consolidation job (promoted by it when it scores no worse)."""


class LibraryVersion(Frozen):
    """One version of an owner's library, as ``hindsight library list`` shows it."""

    version: int = Field(ge=1)
    source: LibrarySource
    note: Text = ""
    created_at: datetime
    templates: int = Field(ge=0, description="Templates the version holds.")
    active: bool = Field(default=False, description="Queries serve it and live learning writes to it.")
    previous: bool = Field(default=False, description="The version a rollback returns to.")


class LibrarySwitch(Frozen):
    """The owner's pointers after a promote or rollback."""

    owner: Name
    active: int = Field(ge=1)
    previous: int | None = Field(default=None, ge=1)


class DiffEntry(Frozen):
    """A rule in one or both of two versions, matched by what it advises (``LibraryVersions.diff``)."""

    content_hash: str
    role: Name
    task_type: Name | None = None
    rule: Text = Field(description="The rule in one line.")
    confidence_a: float | None = Field(default=None, description="None: not in version A.")
    confidence_b: float | None = Field(default=None, description="None: not in version B.")


class LibraryDiff(Frozen):
    """What changed from version ``a`` to version ``b``."""

    owner: Name
    a: int = Field(ge=1)
    b: int = Field(ge=1)
    added: tuple[DiffEntry, ...] = ()
    removed: tuple[DiffEntry, ...] = ()
    changed: tuple[DiffEntry, ...] = Field(default=(), description="Same rule, another confidence.")
    unchanged: int = Field(default=0, ge=0)
