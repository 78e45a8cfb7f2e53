"""Following served experience templates: parse them, test their conditions, fill their params.

This is the only place that reads ``query_experience`` results, so a change in that tool's
result shape is a change here alone (:func:`parse_served`). Two shapes are read: today's full
``templates`` list, and the lean ``experiences`` list the tool answers with by default once it
takes the structured situation (``context_snapshot``, ``available_actions``): one line per
template with its condition rendered as text and the service's own ``applicable`` verdict.
"""

from __future__ import annotations

import ast
import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, JsonValue, ValidationError

from actors.engine.evaluation import evaluate_condition
from actors.engine.model.templates import ActionPattern, Condition, ExperienceTemplate, Predicate
from cluster.core.types import Frozen
from cluster.demo.env_base import Call, StepView

logger = logging.getLogger(__name__)

_PLACEHOLDER = re.compile(r"^<([^<>]+)>$")
_EXTENSION = re.compile(r"\.([A-Za-z0-9]{1,8})$")
_RENDERED = re.compile(r"^(?P<feature>\S+) (?P<op>>=|<=|==|!=|>|<|in|contains) (?P<value>.+)$")
# A lower and an upper bound on one feature render as a band: ``8.5 < size_mb <= 1373.45``.
_BAND = re.compile(r"^(?P<low>\S+) (?P<lop><=|<) (?P<feature>[^\s<>=]+) (?P<hop><=|<) (?P<high>\S+)$")
_LOWER_OP = {"<": ">", "<=": ">="}


class Served(Frozen):
    """A template as served, with the relevance the service gave it (0 when absent).

    From a lean answer the template is rebuilt from its one line: role and task type are the
    ones asked for, and its predicates are parsed back from the rendered condition when they
    can be (``condition_known``).
    """

    template: ExperienceTemplate
    relevance: float = Field(default=0.0)
    applicable: bool | None = Field(default=None, description="The service's verdict on our snapshot; None: unknown.")
    condition_known: bool = Field(default=True, description="False: the condition is text we could not parse.")
    avoid_reason: Literal["fails", "costlier"] | None = Field(
        default=None, description="Why the template avoids its tool: it fails here, or it only costs more."
    )
    text: str = Field(default="", description="The line the service rendered (lean answers).")

    def rendered(self) -> str:
        """The template in words: the service's line when it sent one."""
        return self.text or self.template.render()


def _score(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def parse_served(
    structured: Mapping[str, Any] | None, *, role: str = "agent", task_type: str | None = None
) -> list[Served]:
    """Served templates from a ``query_experience`` structured result, old shape or lean.

    Accepts ``{"templates": [{"template": {...}, "score": x}]}`` and
    ``{"templates": [{...template fields..., "relevance": x}]}`` (``score``/``relevance`` either
    way), and the lean ``{"experiences": [{"id", "condition", "recommended", "avoid",
    "confidence", "applicable", "text"}]}``; full ``templates`` win when both are present (the
    ``detail=true`` answer). Entries that do not parse are skipped with a warning, never fatal.

    Args:
        structured: The tool result's ``structured_content`` (None → nothing served).
        role: The role the query was for (lean entries do not repeat it).
        task_type: The task type the query was for (likewise).

    Returns:
        The templates in the order served.
    """
    if not structured:
        return []
    entries = structured.get("templates") or structured.get("result") or []
    if not entries and isinstance(structured.get("experiences"), list):
        return _parse_lean(structured["experiences"], role, task_type)
    out: list[Served] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, Mapping):
            continue
        body = dict(entry.get("template") or entry)
        score = entry.get("score", entry.get("relevance", body.pop("relevance", body.pop("score", 0.0))))
        try:
            template = ExperienceTemplate.model_validate(body)
        except ValidationError as exc:
            logger.warning("skipping a served template that does not parse: %s", exc.error_count())
            continue
        out.append(Served(template=template, relevance=_score(score), avoid_reason=template.avoid_reason))
    return out


def never_worked(structured: Mapping[str, Any] | None) -> frozenset[str]:
    """The actions a ``query_experience`` answer says never worked at this decision."""
    names = (structured or {}).get("never_worked")
    return frozenset(n for n in names if isinstance(n, str)) if isinstance(names, list) else frozenset()


def parse_condition(text: str) -> tuple[Predicate, ...] | None:
    """Predicates back from a rendered condition (``a > 3 and b == 'x'``); "" → always; None: unreadable."""
    if not text.strip():
        return ()
    out: list[Predicate] = []
    for part in text.split(" and "):
        band = _BAND.match(part.strip())
        if band is not None:
            parts = [
                (band.group("feature"), _LOWER_OP[band.group("lop")], band.group("low")),
                (band.group("feature"), band.group("hop"), band.group("high")),
            ]
        elif (match := _RENDERED.match(part.strip())) is not None:
            parts = [(match.group("feature"), match.group("op"), match.group("value"))]
        else:
            return None
        for feature, op, raw in parts:
            try:
                out.append(Predicate.model_validate({"feature": feature, "op": op, "value": _literal(raw)}))
            except ValidationError:
                return None
    return tuple(out)


def _literal(raw: str) -> object:
    """A rendered value back: Python literals, a set ``{'a', 'b'}`` as a list in its order, bare words."""
    if raw.startswith("{") and raw.endswith("}"):
        raw = f"[{raw[1:-1]}]"
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return {"true": True, "false": False, "null": None}.get(raw, raw)


def _pattern(raw: object) -> ActionPattern | None:
    return ActionPattern.model_validate(raw) if isinstance(raw, Mapping) else None


def _parse_lean(entries: Sequence[object], role: str, task_type: str | None) -> list[Served]:
    out: list[Served] = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        text = entry.get("condition")
        predicates = parse_condition(text) if isinstance(text, str) else ()
        applicable = entry.get("applicable")
        reason = entry.get("avoid_reason")
        try:
            template = ExperienceTemplate(
                template_id=uuid.UUID(str(entry.get("id"))),
                role=role,
                task_type=task_type,
                condition=Condition(
                    predicates=predicates or (),
                    description=text if predicates is None and isinstance(text, str) else "",
                ),
                recommended=ActionPattern.model_validate(entry.get("recommended")),
                avoid=_pattern(entry.get("avoid")),
                retry=entry.get("retry") is True,
                confidence=_score(entry.get("confidence", 0.5)),
            )
        except (ValidationError, ValueError) as exc:
            logger.warning("skipping a served experience that does not parse: %s", type(exc).__name__)
            continue
        out.append(
            Served(
                template=template,
                relevance=_score(entry.get("relevance", entry.get("score", 0.0))),
                applicable=applicable if isinstance(applicable, bool) else None,
                condition_known=predicates is not None,
                avoid_reason=reason if reason in ("fails", "costlier") else template.avoid_reason,
                text=str(entry.get("text") or ""),
            )
        )
    return out


def lookup(context: Mapping[str, JsonValue], path: str) -> tuple[bool, JsonValue]:
    """The value at a dotted path (``len(x)`` → length of list ``x``), and whether it exists."""
    if path.startswith("len(") and path.endswith(")"):
        found, value = lookup(context, path[4:-1])
        return (True, len(value)) if found and isinstance(value, list) else (False, None)
    current: JsonValue = dict(context)
    for part in path.split("."):
        if not isinstance(current, dict) or part not in current:
            return False, None
        current = current[part]
    return True, current


def predicate_holds(predicate: Predicate, context: Mapping[str, JsonValue]) -> bool:
    """Whether one predicate holds on a context snapshot; a missing feature never holds.

    The engine's evaluation, so an agent reads a condition exactly as the service learned it.
    """
    return evaluate_condition([predicate], context) is True


def applies(template: ExperienceTemplate, view: StepView, task_type: str | None) -> bool:
    """The template is for this role and task type, names an available tool and its condition holds."""
    if template.role != view.role or (template.task_type is not None and template.task_type != task_type):
        return False
    if template.recommended.tool not in view.available_actions:
        return False
    return evaluate_condition(template.condition, view.context) is True


def _strings(value: JsonValue) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    return []


def _resolve(name: str, context: Mapping[str, JsonValue]) -> JsonValue | None:
    """A context value for placeholder ``<name>``: a feature path, a path with that extension, a url."""
    found, value = lookup(context, name)
    if found:
        return value
    strings = _strings(dict(context))
    if name.endswith("path"):
        ext = name.removesuffix("path").rstrip("_")
        for text in strings:
            match = _EXTENSION.search(text)
            if match and (not ext or match.group(1).lower() == ext) and "://" not in text:
                return text
    if name == "url":
        return next((s for s in strings if "://" in s), None)
    return None


def fill(pattern: Mapping[str, JsonValue], view: StepView, tool: str) -> dict[str, JsonValue]:
    """Concrete params for a template's pattern on this view.

    Placeholders are filled from the context (a feature of that name, a path with that file
    extension, a url); the rest fall back to what a naive call of the same tool would pass.
    Keys the pattern leaves out keep the naive call's value.
    """
    naive = next((dict(o.params) for o in view.options if o.action == tool), {})
    out: dict[str, JsonValue] = dict(naive)
    for key, value in pattern.items():
        match = _PLACEHOLDER.match(value) if isinstance(value, str) else None
        if match is None:
            out[key] = value
            continue
        resolved = _resolve(match.group(1), view.context)
        if resolved is not None:
            out[key] = resolved
        elif key not in naive:
            out.pop(key, None)
    return out


def usable(served: Served, view: StepView, task_type: str | None) -> bool:
    """Whether to act on a served template here.

    The service's verdict wins where it gave one (it checked the condition against the snapshot
    we sent); otherwise the condition is checked here, and a condition we cannot read is not
    followed. Role, task type and tool availability are always checked here.
    """
    if served.applicable is False:
        return False
    if served.applicable is True:
        t = served.template
        return applies(t.model_copy(update={"condition": Condition()}), view, task_type)
    return served.condition_known and applies(served.template, view, task_type)


class Choice(Frozen):
    """A call an agent takes on a template's advice."""

    call: Call
    template_id: str


def _specificity(served: Served) -> tuple[int, float, float, str]:
    # More predicates = narrower situation (a supplementary edge case beats its parent rule).
    t = served.template
    return (len(t.condition.predicates), t.confidence, served.relevance, str(t.template_id))


def advised_call(served: Served, view: StepView) -> Call:
    """The call a template recommends, its placeholders filled on this view."""
    pattern = served.template.recommended
    return Call(action=pattern.tool, params=fill(pattern.params, view, pattern.tool))


def follow(
    served: Sequence[Served], view: StepView, task_type: str | None, tried: Sequence[Call] = ()
) -> Choice | None:
    """Decide from served templates at one step.

    What a template avoids is not used to rule a tool out here: the agent explores only once
    every applicable template's own call was tried, and a rule whose call failed here was wrong
    about this situation (the tool it avoids failed where its call worked, which this situation
    is not).

    Args:
        served: Templates served for this situation.
        view: What the agent sees now.
        task_type: The task's type label.
        tried: Calls already tried at this step (they failed); not repeated, except once when the
            template says its call is worth a retry.

    Returns:
        The call the first applicable template recommends — in the service's order when it judged
        the situation, else the most specific first — or, once every option was tried, an advised
        call that failed only once; None when no template applies or its call was tried.
    """
    candidates = [s for s in served if usable(s, view, task_type)]
    # A service that checked the situation has ranked its answer (fit, confidence, relevance):
    # follow its order, as a model reading the prompt block would. Otherwise the narrowest first.
    judged = any(s.applicable is not None for s in served)
    ordered = candidates if judged else sorted(candidates, key=_specificity, reverse=True)
    for item in ordered:
        call = advised_call(item, view)
        if tried.count(call) < (2 if item.template.retry else 1):
            return Choice(call=call, template_id=str(item.template.template_id))
    tried_tools = {c.action for c in tried}
    if all(o.action in tried_tools for o in view.options):
        # Every option failed once: the advised call goes first again, before the explorer's turn.
        for item in ordered:
            call = advised_call(item, view)
            if tried.count(call) == 1:
                return Choice(call=call, template_id=str(item.template.template_id))
    return None
