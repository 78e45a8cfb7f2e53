"""The naive baseline keeps one rule per action that worked, with one separating feature each."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from mcp import Client

from cluster.demo.agents import Decision, run_episode
from cluster.demo.env_base import Call, Episode, StepResult, StepView
from cluster.demo.envs import ArchiveUpload, AssetPreview, make_episode
from cluster.demo.naive import (
    NaivePolicy,
    NaiveServer,
    Split,
    Try,
    features_of,
    learn_rule,
    separating_split,
    signature_of,
)

ClientFor = Callable[[str], AbstractAsyncContextManager[Client]]


def tries(action: str, *cases: tuple[dict[str, Any], bool]) -> list[Try]:
    return [Try(role="agent", signature="s", action=action, features=f, succeeded=ok) for f, ok in cases]


def test_a_threshold_separates_a_numeric_feature() -> None:
    data = tries("put_object", ({"size_mb": 2.0}, True), ({"size_mb": 6.0}, True), ({"size_mb": 40.0}, False))
    assert separating_split(data) == Split(feature="size_mb", op="<=", value=23.0)


def test_an_equality_separates_a_categorical_feature_and_ignores_a_harmless_one() -> None:
    data = tries(
        "render_first_page",
        ({"mime_type": "application/pdf", "uploaded_on": "14/03/2026"}, True),
        ({"mime_type": "application/pdf", "uploaded_on": "02/11/2025"}, True),
        ({"mime_type": "image/png", "uploaded_on": "14/03/2026"}, False),
        ({"mime_type": "image/webp", "uploaded_on": "01/01/2024"}, False),
    )
    assert separating_split(data) == Split(feature="mime_type", op="==", value="application/pdf")


def test_an_action_that_never_failed_gets_an_unconditional_rule_with_a_laplace_confidence() -> None:
    rule = learn_rule(tries("transcode_padded", ({"aspect_ratio": "4/3"}, True), ({"aspect_ratio": "16/9"}, True)))
    assert rule is not None
    assert rule.split is None
    assert (rule.successes, rule.tries) == (2, 2)
    assert rule.confidence == pytest.approx(3 / 4)


def test_the_confidence_counts_only_tries_where_the_split_holds() -> None:
    rule = learn_rule(
        tries(
            "scale_stream",
            ({"aspect_ratio": "16/9"}, True),
            ({"aspect_ratio": "16/9"}, True),
            ({"aspect_ratio": "16/9"}, False),
            ({"aspect_ratio": "4/3"}, False),
        )
    )
    assert rule is not None
    assert rule.split == Split(feature="aspect_ratio", op="==", value="16/9")
    assert (rule.successes, rule.tries) == (2, 3)
    assert rule.confidence == pytest.approx(3 / 5)


def test_an_action_that_never_worked_gets_no_rule() -> None:
    assert learn_rule(tries("upload_via_ftp", ({"size_mb": 1.0}, False))) is None


def test_splits_never_hold_on_a_missing_feature_or_a_boolean_against_a_number() -> None:
    assert not Split(feature="size_mb", op=">", value=3).holds({})
    assert not Split(feature="flag", op="<=", value=1).holds({"flag": True})
    assert not Split(feature="flag", op="==", value=1).holds({"flag": True})
    assert features_of({"a": {"b": 1}, "items": [1, 2], "c": "x"}) == {"a.b": 1, "len(items)": 2, "c": "x"}


def decision_view(episode: Episode) -> StepView:
    first = episode.view()
    assert first is not None
    episode.act(first.options[0])
    view = episode.view()
    assert view is not None
    return view


def feed(server: NaiveServer, episode: Episode, action: str) -> None:
    view = decision_view(episode)
    call = next(o for o in view.options if o.action == action)
    result = episode.act(call)
    server.add(
        Try(
            role=view.role,
            signature=signature_of(view, episode.task_type),
            action=action,
            features=features_of(view.context),
            succeeded=result.status == "success",
        )
    )


def test_the_server_recommends_the_best_rule_whose_split_holds_only_after_commit() -> None:
    server = NaiveServer()
    for size, action in [(2.0, "put_object"), (3.0, "put_object"), (90.0, "put_object"), (90.0, "multipart_upload")]:
        episode = ArchiveUpload(1)
        episode.size_mb = size
        feed(server, episode, action)
    small = ArchiveUpload(2)
    small.size_mb = 1.5
    view = decision_view(small)
    assert server.recommend(view, small.task_type) == []  # nothing learned before the round ends
    assert server.commit() == 4
    # put_object (2 of 2 where size_mb <= 46.5: 3/4) beats multipart (never failed, 1 of 1: 2/3).
    assert [r.action for r in server.recommend(view, small.task_type)] == ["put_object", "multipart_upload"]
    large = ArchiveUpload(3)
    large.size_mb = 200.0
    assert [r.action for r in server.recommend(decision_view(large), large.task_type)] == ["multipart_upload"]
    # Another family's decision has another signature: nothing pools across it.
    other = AssetPreview(1)
    assert server.recommend(decision_view(other), other.task_type) == []


@pytest.mark.anyio
async def test_the_naive_agent_follows_its_rule_and_records_like_the_others(client_for: ClientFor) -> None:
    server = NaiveServer()
    policy = NaivePolicy(server)
    async with client_for("naive") as client:
        for seed in range(12):
            await run_episode(client, make_episode("asset_preview", seed), policy, agent_id="naive")
        server.commit()
        assert server.rules
        results = [
            await run_episode(client, make_episode("asset_preview", seed), policy, agent_id="naive")
            for seed in range(100, 110)
        ]
    followed = [r for r in results if r.applied_template_ids]
    assert followed
    assert all(t.startswith("naive-") for r in followed for t in r.served_template_ids)
    assert all(r.trajectory_ids for r in results)


def test_the_naive_policy_observes_only_decisions() -> None:
    server = NaiveServer()
    policy = NaivePolicy(server)
    episode = make_episode("video_resize", 0)
    view = episode.view()
    assert view is not None
    policy.observe(view, Decision(call=view.options[0], source="explore"), StepResult(status="success", summary=""))
    assert server.commit() == 0
    decision = decision_view(episode)
    call = Call(action="scale_stream", params=dict(decision.options[0].params))
    policy.observe(decision, Decision(call=call, source="explore"), StepResult(status="failure", summary=""))
    assert server.commit() == 1
