"""Retirement through the store: a contradicted template stays in SQL with its reason and is never served."""

from __future__ import annotations

import json

from actors.engine.model.templates import ActionPattern, Condition, ExperienceTemplate, Predicate, Support
from actors.engine.retire import ActionOutcome
from cluster.experience.models import Situation
from cluster.experience.service import ExperienceService
from cluster.storage.db import Database

OWNER = "retire-owner"
SIGNATURE = "upload-sig"


def _stale() -> ExperienceTemplate:
    return ExperienceTemplate(
        role="agent",
        task_type="upload",
        signature=SIGNATURE,
        condition=Condition(
            predicates=(
                Predicate(feature="size_mb", op=">", value=8.5),
                Predicate(feature="size_mb", op="<=", value=1373.45),
            )
        ),
        recommended=ActionPattern(tool="multipart_upload", params={"part_mb": 16}),
        avoid=ActionPattern(tool="put_object"),
        rationale="multipart uploads work for archives over 8 MB",
        support=Support(successes=3, failures=3, trajectories=3),
        confidence=0.9,
    )


def _run(size: float, ok: bool) -> ActionOutcome:
    return ActionOutcome(
        signature=SIGNATURE,
        action="multipart_upload",
        params={"part_mb": 16},
        context={"size_mb": size},
        succeeded=ok,
    )


def test_a_contradicted_template_is_kept_with_its_reason_and_only_its_successor_is_served(
    database: Database, experience: ExperienceService
) -> None:
    stale_id = experience.learn(OWNER, [_stale()]).new[0]
    outcomes = [_run(20.0, True), _run(500.0, True), _run(616.0, False)]
    with database.transaction() as session:
        report = experience.learn_in(session, OWNER, [], outcomes)
    experience.index_pending(OWNER)
    assert report.retired == (stale_id,)
    assert len(report.new) == 1
    successor_id = report.new[0]

    retired = experience.get_template(OWNER, stale_id)
    assert retired.retired_reason is not None
    assert "size_mb above 500" in retired.retired_reason
    assert str(successor_id) in retired.retired_reason
    assert experience.get_template(OWNER, successor_id).condition.render() == "8.5 < size_mb <= 558.0"

    for size in (300.0, 1000.0):
        served = experience.query_experience(
            OWNER,
            "upload the archive",
            role="agent",
            min_confidence=0.0,
            situation=Situation(
                context_snapshot={"size_mb": size}, available_actions=["multipart_upload", "put_object"]
            ),
            include_inapplicable=True,
        )
        ids = [s.template.template_id for s in served.templates]
        assert stale_id not in ids
        assert ids == [successor_id]

    # The record stays: the export lists the retired template with its reason.
    lines = [json.loads(line) for line in experience.export_library(OWNER)]
    reasons = {line["template"]["template_id"]: line["template"]["retired_reason"] for line in lines[1:]}
    assert reasons[str(stale_id)] == retired.retired_reason
    assert reasons[str(successor_id)] is None

    # Learning the same batch again changes nothing.
    with database.transaction() as session:
        again = experience.learn_in(session, OWNER, [], outcomes)
    assert (again.new, again.retired, again.merged) == ((), (), ())
