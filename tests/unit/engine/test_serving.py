"""Serving by situation: which templates fit the decision an agent faces, and in what order."""

from __future__ import annotations

import uuid

from actors.engine.model.templates import (
    ActionPattern,
    Condition,
    EvidenceKind,
    ExperienceTemplate,
    Predicate,
    Provenance,
)
from actors.engine.serving import (
    FIT,
    Fit,
    applicable,
    fit,
    guessing,
    never_worked,
    overruled,
    query_signature,
    rank_score,
    retry_stands,
    snapshot_features,
)

ACTIONS = ("bulk_import", "add_item", "paste_rows")
SNAPSHOT = {"goal": "import products", "rows": 500, "schema": "uniform"}


def template(
    tool: str = "bulk_import", *predicates: Predicate, avoid: str | None = "add_item", **kw: object
) -> ExperienceTemplate:
    return ExperienceTemplate.model_validate(
        {
            "recommended": ActionPattern(tool=tool),
            "avoid": ActionPattern(tool=avoid) if avoid else None,
            "condition": Condition(predicates=predicates),
            "role": "executor",
            "task_type": "import",
            **kw,
        }
    )


def judge(t: ExperienceTemplate, snapshot: dict[str, object] = SNAPSHOT, actions: tuple[str, ...] = ACTIONS) -> Fit:
    signature = query_signature("executor", "import", "", snapshot, actions)  # type: ignore[arg-type]
    return fit(t, snapshot, snapshot_features(snapshot), actions, signature)  # type: ignore[arg-type]


def test_a_template_for_a_tool_not_in_view_is_for_another_decision() -> None:
    assert judge(template("click")) is Fit.NOT_APPLICABLE


def test_a_false_condition_does_not_apply_and_a_missing_feature_is_unknown() -> None:
    big = Predicate(feature="rows", op=">", value=100)
    assert judge(template("bulk_import", big)) is Fit.HOLDS
    assert judge(template("bulk_import", Predicate(feature="rows", op="<=", value=100))) is Fit.NOT_APPLICABLE
    assert judge(template("bulk_import", Predicate(feature="encoding", op="==", value="utf-8"))) is Fit.UNKNOWN
    assert applicable(Fit.UNKNOWN) is None
    assert applicable(Fit.NOT_APPLICABLE) is False
    assert applicable(Fit.HOLDS) is True


def test_a_template_learned_at_this_very_decision_fits_best() -> None:
    signature = query_signature("executor", "import", "", SNAPSHOT, ACTIONS)  # type: ignore[arg-type]
    same = template("bulk_import", Predicate(feature="rows", op=">", value=100), signature=signature)
    other = template("bulk_import", Predicate(feature="rows", op=">", value=100), signature="elsewhere")
    assert judge(same) is Fit.HOLDS_SAME_DECISION
    assert judge(other) is Fit.HOLDS
    assert FIT[Fit.HOLDS_SAME_DECISION] > FIT[Fit.HOLDS] > FIT[Fit.ALWAYS] > FIT[Fit.UNKNOWN]


def test_a_broad_rule_is_in_doubt_where_its_refinement_is_false() -> None:
    latin = Predicate(feature="encoding", op="==", value="latin-1")
    accents = Predicate(feature="non_ascii", op="==", value=True)
    broad = template("set_encoding", latin, avoid="export_csv")
    narrow = template("set_encoding", latin, accents, avoid="export_csv")
    unrelated = template("export_csv", latin, avoid="set_encoding")
    plain = {"encoding": "latin-1", "non_ascii": False}
    actions = ("set_encoding", "export_csv")
    judged = [(t, judge(t, plain, actions)) for t in (broad, narrow, unrelated)]
    assert [f for _, f in judged] == [Fit.HOLDS, Fit.NOT_APPLICABLE, Fit.HOLDS]
    assert overruled(judged) == [Fit.UNKNOWN, Fit.NOT_APPLICABLE, Fit.HOLDS]
    accented = {"encoding": "latin-1", "non_ascii": True}
    judged = [(t, judge(t, accented, actions)) for t in (broad, narrow)]
    assert overruled(judged) == [Fit.HOLDS, Fit.HOLDS]


def test_a_broad_threshold_is_in_doubt_where_a_stricter_one_is_false() -> None:
    # put_object learned up to 207 MB early on, then up to 9.2 MB once it failed at 20 MB.
    broad = template("put_object", Predicate(feature="size_mb", op="<=", value=207.25), avoid="multipart_upload")
    strict = template("put_object", Predicate(feature="size_mb", op="<=", value=9.2), avoid="multipart_upload")
    actions = ("put_object", "multipart_upload")
    judged = [(t, judge(t, {"size_mb": 20.0}, actions)) for t in (broad, strict)]
    assert overruled(judged) == [Fit.UNKNOWN, Fit.NOT_APPLICABLE]
    judged = [(t, judge(t, {"size_mb": 3.0}, actions)) for t in (broad, strict)]
    assert overruled(judged) == [Fit.HOLDS, Fit.HOLDS]


def test_fit_outranks_confidence_and_relevance_in_their_usual_spread() -> None:
    # Served templates sit above the 0.7 threshold; relevance differs by tenths for one decision.
    assert rank_score(Fit.HOLDS, 0.8, 0.5) > rank_score(Fit.ALWAYS, 1.0, 0.6)
    assert rank_score(Fit.ALWAYS, 0.8, 0.5) > rank_score(Fit.UNKNOWN, 0.95, 0.6)
    assert rank_score(Fit.HOLDS, 0.9, 0.5) > rank_score(Fit.HOLDS, 0.8, 0.5)
    assert 0.0 <= rank_score(Fit.UNKNOWN, 1.0, -1.0) <= 1.0


def test_a_rule_against_a_third_tool_is_in_doubt_where_another_avoids_its_tool() -> None:
    # plan_incremental over a decoy up to 5864 rows; plan_bulk over plan_incremental above 5489.
    versus_decoy = template(
        "plan_incremental", Predicate(feature="row_count", op="<=", value=5864), avoid="plan_streaming"
    )
    direct = template("plan_bulk", Predicate(feature="row_count", op=">", value=5489), avoid="plan_incremental")
    actions = ("plan_bulk", "plan_incremental", "plan_streaming")
    judged = [(t, judge(t, {"row_count": 5828}, actions)) for t in (versus_decoy, direct)]
    assert overruled(judged) == [Fit.UNKNOWN, Fit.HOLDS]
    # Two rules that answer each other are left to the ranking.
    answer = template("plan_incremental", Predicate(feature="row_count", op="<=", value=5864), avoid="plan_bulk")
    judged = [(t, judge(t, {"row_count": 5828}, actions)) for t in (answer, direct)]
    assert overruled(judged) == [Fit.HOLDS, Fit.HOLDS]


def test_a_rule_without_a_condition_puts_no_holding_rule_in_doubt() -> None:
    # capture_partial over capture_payment everywhere, from one refused capture; capture_payment
    # over a decoy where the authorization was approved: the conditional rule saw it work here.
    actions = ("capture_payment", "capture_partial", "start_3ds_challenge")
    everywhere = template("capture_partial", avoid="capture_payment")
    approved = template(
        "capture_payment", Predicate(feature="auth_result", op="==", value="approved"), avoid="refund_and_recharge"
    )
    judged = [(t, judge(t, {"auth_result": "approved"}, actions)) for t in (everywhere, approved)]
    assert [value for _, value in judged] == [Fit.ALWAYS, Fit.HOLDS]
    assert overruled(judged) == [Fit.ALWAYS, Fit.HOLDS]
    # Another rule without a condition is put in doubt as before (neither says where it holds).
    decoy_everywhere = template("capture_payment", avoid="refund_and_recharge")
    judged = [(t, judge(t, {"auth_result": "approved"}, actions)) for t in (everywhere, decoy_everywhere)]
    assert overruled(judged) == [Fit.ALWAYS, Fit.UNKNOWN]


def test_a_bound_holds_by_guess_past_the_last_value_where_the_call_worked() -> None:
    # rows <= 7363: plan_incremental worked from 50 to 2,870 rows and failed from 11,857 on.
    upto = template(
        "plan_incremental", Predicate(feature="row_count", op="<=", value=7363), tested={"row_count": (50, 2870)}
    )
    assert guessing(upto, {"row_count": 6111})
    assert not guessing(upto, {"row_count": 2870})
    assert not guessing(upto, {"row_count": 10})  # below every success, but away from the bound
    above = template(
        "plan_bulk", Predicate(feature="row_count", op=">", value=7363), tested={"row_count": (11857, 45923)}
    )
    assert guessing(above, {"row_count": 8000})
    assert not guessing(above, {"row_count": 90000})
    # Nothing known, a missing or non-numeric feature: no guess to speak of.
    assert not guessing(
        template("plan_incremental", Predicate(feature="row_count", op="<=", value=7363)), {"row_count": 6111}
    )
    assert not guessing(upto, {"rows": 6111})
    assert not guessing(upto, {"row_count": True})


def test_a_rule_without_a_condition_still_doubts_one_that_holds_only_by_guess() -> None:
    actions = ("plan_bulk", "plan_incremental", "plan_manual_export")
    everywhere = template("plan_bulk", avoid="plan_incremental")
    upto = template(
        "plan_incremental",
        Predicate(feature="row_count", op="<=", value=7363),
        avoid="plan_manual_export",
        tested={"row_count": (50, 2870)},
    )
    for rows, verdict in ((6111, Fit.UNKNOWN), (1200, Fit.HOLDS)):
        snapshot = {"row_count": rows}
        judged = [(t, judge(t, snapshot, actions)) for t in (everywhere, upto)]
        assert overruled(judged, snapshot_features(snapshot)) == [Fit.ALWAYS, verdict]


def test_retry_advice_stands_only_where_no_applying_rule_says_the_call_fails_here() -> None:
    actions = ("export_csv", "set_encoding", "export_json")
    flaky = template("export_csv", Predicate(feature="rows", op=">", value=44), avoid="export_json", retry=True)
    latin = Predicate(feature="encoding", op="==", value="latin-1")
    fails_here = template("set_encoding", latin, avoid="export_csv")
    assert fails_here.avoid_reason == "fails"
    on_latin = [(t, judge(t, {"rows": 333, "encoding": "latin-1"}, actions)) for t in (flaky, fails_here)]
    assert not retry_stands(flaky, overruled_pairs(on_latin))
    on_utf8 = [(t, judge(t, {"rows": 333, "encoding": "utf-8"}, actions)) for t in (flaky, fails_here)]
    assert retry_stands(flaky, overruled_pairs(on_utf8))
    costlier_only = fails_here.model_copy(
        update={
            "provenance": (
                Provenance(trajectory_id=uuid.uuid4(), node_ids=(uuid.uuid4(),), kind=EvidenceKind.AVOIDED_COSTLIER),
            )
        }
    )
    assert costlier_only.avoid_reason == "costlier"
    on_latin = [(t, judge(t, {"rows": 333, "encoding": "latin-1"}, actions)) for t in (flaky, costlier_only)]
    assert retry_stands(flaky, overruled_pairs(on_latin))
    assert not retry_stands(fails_here, overruled_pairs(on_latin))  # no retry advice to begin with


def overruled_pairs(judged: list[tuple[ExperienceTemplate, Fit]]) -> list[tuple[ExperienceTemplate, Fit]]:
    return list(zip([t for t, _ in judged], overruled(judged), strict=True))


def test_never_worked_names_tools_that_only_failed_at_this_decision() -> None:
    sig = "executor|import|decision"
    small = Predicate(feature="rows", op="<=", value=20)
    library = [
        # Each working tool avoids the decoy under its own condition, one names another decoy.
        template("bulk_import", avoid="delete_all", signature=sig, caveats=("also avoid wipe: it failed here too",)),
        template("add_item", small, avoid="delete_all", signature=sig),
        # add_item is avoided for failing here but recommended above: it worked somewhere.
        template("paste_rows", avoid="add_item", signature=sig),
        # Avoided only as the costlier way: it worked.
        template(
            "paste_rows",
            avoid="stream_import",
            signature=sig,
            provenance=(Provenance(trajectory_id=uuid.uuid4(), kind=EvidenceKind.AVOIDED_COSTLIER),),
        ),
        # Another decision's decoy says nothing here.
        template("bulk_import", avoid="drop_table", signature="executor|import|other"),
    ]
    assert never_worked(library, sig) == ("delete_all", "wipe")
    assert never_worked(library, sig, ("bulk_import", "wipe")) == ("wipe",)
    assert never_worked(library, "executor|import|unknown") == ()
