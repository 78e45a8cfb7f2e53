"""A role's library as Agent Skills and back (issue 48): valid SKILL.md files, a faithful round trip,
and a rule edited by hand read as a manual template."""

from __future__ import annotations

import re

import pytest
import yaml

from actors.engine.model.templates import Predicate, TemplateSource
from cluster.core.errors import InvalidInput
from cluster.experience.skills import MAX_DESCRIPTION, export_skills, parse_skill
from tests.integration.experience.factories import template

LIBRARY = [
    template("bulk_import", avoid="add_item", predicates=(Predicate(feature="rows", op=">", value=20),)),
    template("stream_import", "the import file is huge", confidence=0.7),
    template("fill_form", "the form has one field", task_type="form"),
    template("plan_steps", "always", role="planner", task_type="catalog_import"),
]


def test_each_task_type_of_the_role_is_one_skill_with_standard_front_matter() -> None:
    files = export_skills(LIBRARY, "executor")
    assert sorted(files) == ["executor-catalog-import", "executor-form"]
    for name, text in files.items():
        head = text.split("---\n")[1]
        front = yaml.safe_load(head)
        assert front["name"] == name
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", front["name"])
        assert 0 < len(front["description"]) <= MAX_DESCRIPTION
    body = files["executor-catalog-import"]
    assert "## Prefer bulk_import over add_item" in body
    assert "- Avoid: add_item" in body
    assert "plan_steps" not in body  # another role's rule


def test_a_skill_reads_back_as_the_same_templates() -> None:
    files = export_skills(LIBRARY, "executor")
    front, templates = parse_skill(files["executor-catalog-import"])
    assert front["name"] == "executor-catalog-import"
    assert templates == sorted(LIBRARY[:2], key=lambda t: -t.confidence)


def test_a_rule_edited_by_hand_becomes_a_manual_template() -> None:
    text = export_skills(LIBRARY, "executor")["executor-catalog-import"]
    edited = text.replace("- Avoid: add_item", "- Avoid: paste_rows")
    _, templates = parse_skill(edited)
    bulk = next(t for t in templates if t.recommended.tool == "bulk_import")
    assert bulk.source is TemplateSource.MANUAL
    assert bulk.avoid is not None
    assert bulk.avoid.tool == "paste_rows"
    assert (bulk.role, bulk.task_type) == ("executor", "catalog_import")
    assert bulk.confidence == pytest.approx(0.9)
    stream = next(t for t in templates if t.recommended.tool == "stream_import")
    assert stream == LIBRARY[1]  # untouched: the learned template whole


def test_a_skill_written_by_hand_is_read_and_a_bad_one_named() -> None:
    text = (
        "---\nname: executor-upload\ndescription: Uploads.\nmetadata: {hindsight-role: executor}\n---\n\n"
        "## Prefer multipart_upload\n- When: the file is over 100 MB\n- Do: multipart_upload\n- Confidence: 0.6\n"
    )
    _, (rule,) = parse_skill(text)
    assert (rule.recommended.tool, rule.condition.description, rule.confidence) == (
        "multipart_upload",
        "the file is over 100 MB",
        0.6,
    )
    assert rule.source is TemplateSource.MANUAL
    with pytest.raises(InvalidInput, match="front matter"):
        parse_skill("## Prefer x\n- Do: x\n")
    with pytest.raises(InvalidInput, match="'- Do: <action>' line is required"):
        parse_skill(text.replace("- Do: multipart_upload\n", ""))
