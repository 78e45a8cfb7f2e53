"""A role's library as an Agent Skills folder, and back: lessons where agent runtimes already look.

One ``<name>/SKILL.md`` per task type: YAML front matter with the standard ``name`` (lowercase
letters, digits and hyphens, the folder's name) and ``description`` (what the skill is for, at most
1024 characters), then the rules as the body, one section each::

    ## Prefer bulk_import over add_item
    - When: a product import has more than 20 rows
    - Do: bulk_import
    - Avoid: add_item
    - Why: one-by-one add_item times out
    - Confidence: 0.82
    <!-- hindsight 3f9c0a1b {"template": {...}} -->

The comment carries the learned template whole, with a hash of the section's visible lines. On
import, a section whose lines still match its hash is that template again; a section edited by
hand (or written by hand, without the comment) becomes a manual template of what its lines say.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from itertools import groupby

import yaml
from pydantic import ValidationError

from actors.engine.model.templates import ActionPattern, Condition, ExperienceTemplate, TemplateSource
from cluster.core.errors import InvalidInput

SKILL_FILE = "SKILL.md"
MAX_DESCRIPTION = 1024
_NAME_CHARS = 64
_COMMENT = re.compile(r"^<!-- hindsight ([0-9a-f]{8}) (\{.*\}) -->$")
_FIELDS = ("When", "Do", "Avoid", "Why", "Confidence")


def skill_name(role: str, task_type: str | None) -> str:
    """The skill's name: role and task type in lowercase letters, digits and hyphens."""
    raw = f"{role}-{task_type or 'general'}".lower()
    name = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", raw)).strip("-")
    return name[:_NAME_CHARS].rstrip("-") or "hindsight"


def export_skills(templates: Iterable[ExperienceTemplate], role: str) -> dict[str, str]:
    """``SKILL.md`` text per skill name for ``role``'s templates (retired ones left out), one per task type."""
    mine = [t for t in templates if t.role == role and t.retired_reason is None]
    mine.sort(key=lambda t: (t.task_type or "", -t.confidence))
    files: dict[str, str] = {}
    for task_type, group in groupby(mine, key=lambda t: t.task_type):
        rules = list(group)
        name = skill_name(role, task_type)
        front = {
            "name": name,
            "description": _description(role, task_type, rules),
            "metadata": {"hindsight-role": role, "hindsight-task-type": task_type or ""},
        }
        head = yaml.safe_dump(front, sort_keys=False, allow_unicode=True).strip()
        title = f"# {role}: {task_type or 'any task'}"
        body = "\n\n".join(_section(t) for t in rules)
        files[name] = (
            f"---\n{head}\n---\n\n{title}\n\nRules learned from earlier runs, most confident first.\n\n{body}\n"
        )
    return files


def parse_skill(text: str) -> tuple[dict[str, object], list[ExperienceTemplate]]:
    """The front matter and the templates of one ``SKILL.md``.

    Raises:
        InvalidInput: no front matter, a ``name`` or ``description`` missing, or a rule without ``Do``.
    """
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.DOTALL)
    if match is None:
        raise InvalidInput("SKILL.md must start with YAML front matter between --- lines")
    front = yaml.safe_load(match.group(1)) or {}
    if not isinstance(front, dict) or not front.get("name") or not front.get("description"):
        raise InvalidInput("SKILL.md front matter must have a name and a description")
    found = front.get("metadata")
    meta: dict[str, object] = found if isinstance(found, dict) else {}
    role = str(meta.get("hindsight-role") or "agent")
    task_type = str(meta.get("hindsight-task-type") or "") or None
    sections = re.split(r"^## ", match.group(2), flags=re.MULTILINE)[1:]
    return front, [_template(section, role, task_type) for section in sections]


def _description(role: str, task_type: str | None, rules: Sequence[ExperienceTemplate]) -> str:
    where = f"{task_type} tasks" if task_type else "any task"
    text = f"What worked for the {role} role on {where}, learned from earlier runs: " + "; ".join(
        t.brief(120) for t in rules
    )
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 1] + "…"


def _lines(template: ExperienceTemplate) -> list[str]:
    title = f"Prefer {template.recommended.tool}" + (f" over {template.avoid.tool}" if template.avoid else "")
    lines = [f"## {title}"]
    if template.condition.render():
        lines.append(f"- When: {_one_line(template.condition.render())}")
    lines.append(f"- Do: {_one_line(template.recommended.render())}")
    if template.avoid is not None:
        lines.append(f"- Avoid: {_one_line(template.avoid.render())}")
    if template.rationale:
        lines.append(f"- Why: {_one_line(template.rationale)}")
    lines.extend(f"- Caveat: {_one_line(c)}" for c in template.caveats)
    lines.append(f"- Confidence: {template.confidence:.2f}")
    return lines


def _section(template: ExperienceTemplate) -> str:
    lines = _lines(template)
    whole = json.dumps({"template": template.model_dump(mode="json")}, sort_keys=True, ensure_ascii=False)
    return "\n".join([*lines, f"<!-- hindsight {_digest(lines)} {whole} -->"])


def _template(section: str, role: str, task_type: str | None) -> ExperienceTemplate:
    lines = [line.rstrip() for line in f"## {section}".strip().splitlines() if line.strip()]
    visible = [line for line in lines if not _COMMENT.match(line)]
    for line in lines:
        found = _COMMENT.match(line)
        if found and found.group(1) == _digest(visible):
            try:
                return ExperienceTemplate.model_validate(json.loads(found.group(2))["template"])
            except (ValueError, KeyError, ValidationError):
                break  # a damaged comment: read the lines as written
    return _manual(visible, role, task_type)


def _manual(lines: Sequence[str], role: str, task_type: str | None) -> ExperienceTemplate:
    """A manual template of what a hand-written (or hand-edited) rule says."""
    fields: dict[str, str] = {}
    caveats: list[str] = []
    for line in lines[1:]:
        key, _, value = line.removeprefix("- ").partition(":")
        if key == "Caveat":
            caveats.append(value.strip())
        elif key in _FIELDS:
            fields[key] = value.strip()
    title = lines[0].removeprefix("## ")
    if "Do" not in fields:
        raise InvalidInput(f"rule {title!r}: a '- Do: <action>' line is required")
    try:
        confidence = float(fields.get("Confidence", "0.5"))
        return ExperienceTemplate(
            role=role,
            task_type=task_type,
            condition=Condition(description=fields.get("When", "")),
            recommended=ActionPattern(tool=_tool(fields["Do"])),
            avoid=ActionPattern(tool=_tool(fields["Avoid"])) if fields.get("Avoid") else None,
            rationale=fields.get("Why", ""),
            caveats=tuple(caveats),
            confidence=confidence,
            source=TemplateSource.MANUAL,
        )
    except (ValueError, ValidationError) as exc:
        raise InvalidInput(f"rule {title!r}: {exc}") from exc


def _tool(action: str) -> str:
    """The tool of an action as written: ``bulk_import(file="x")`` or ``bulk_import``."""
    return action.split("(", 1)[0].strip()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _digest(lines: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:8]
