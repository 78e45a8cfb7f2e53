"""TextWorldExpress games through the real service over MCP (the official client, in process)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
from mcp import Client

from actors.engine.model.templates import ActionPattern, Condition, ExperienceTemplate, Predicate
from bench.textworld.agent import FocusedHindsightPolicy
from bench.textworld.bound import gold_places, measure, offered_places
from bench.textworld.bound import main as bound_main
from bench.textworld.game import GameEpisode, available, parse_action
from bench.textworld.run import GAMES, check_game, main
from cluster.demo.agents import Decision, ExplorePolicy, run_episode
from cluster.demo.env_base import Call, Episode, StepResult, StepView
from cluster.demo.following import Served
from cluster.demo.recording import FINISH, ToolClient
from cluster.services import Services, analysis_for

pytestmark = [
    pytest.mark.textworld,
    pytest.mark.skipif(available() is not None, reason=available() or ""),
]
TWC = GAMES["twc"]


class GoldPolicy(ExplorePolicy):
    """Plays the game's gold path (a test's way to reach a win in few steps)."""

    async def choose(self, client: ToolClient, episode: Episode, view: StepView, tried: Sequence[Call]) -> Decision:
        assert isinstance(episode, GameEpisode)
        wanted = parse_action(episode.gold[episode.steps])
        assert wanted in view.options
        return Decision(call=wanted, source="explore")


def test_parse_action_reads_verb_object_and_target() -> None:
    assert parse_action("put black blanket in chest of drawers") == Call(
        action="put", params={"object": "black blanket", "target": "chest of drawers"}
    )
    assert parse_action("cook block of cheese in barbeque").params == {
        "object": "block of cheese",
        "target": "barbeque",
    }
    assert parse_action("inventory") == Call(action="inventory")


@pytest.mark.anyio
async def test_a_won_game_is_recorded_step_by_step_and_finalized(client: Client, services: Services) -> None:
    episode = GameEpisode("twc", TWC, "train", 1)
    assert episode.points == 0.0
    result = await run_episode(client, episode, GoldPolicy(), agent_id="test")
    assert result.succeeded
    assert episode.points == 1.0
    assert result.steps == len(episode.gold) == result.oracle_steps
    stored = services.capture.load("local", uuid.UUID(result.trajectory_ids["agent"]))
    assert stored.outcome is not None
    assert stored.outcome.status.value == "success"
    puts = [n for n in stored.nodes if n.chosen_action == "put"]
    assert puts
    assert all(set(n.action_params) == {"object", "target"} for n in puts)
    # The thing a call acts on is the focus of the snapshot it is recorded with.
    assert all(n.context_snapshot["focus"] == n.action_params["object"] for n in puts)
    # Its actions are the verbs on that thing and those on nothing: the same decision in every room.
    assert all(set(n.available_actions) == {"put", "inventory"} for n in puts)
    assert all(n.execution_result.status.value == "success" for n in puts)
    assert analysis_for(services).run_once().trajectories == 1


@pytest.mark.anyio
async def test_a_lost_game_says_how_far_it_got(client: Client) -> None:
    whole = GameEpisode("twc", TWC, "train", 1)
    short = GameEpisode("twc", TWC, "train", 1, budget=len(whole.gold) - 1)
    result = await run_episode(client, short, GoldPolicy(), agent_id="test")
    assert not result.succeeded
    assert 0.0 < short.points < 1.0  # all but the last put scored


@pytest.mark.anyio
async def test_the_hindsight_agent_plays_a_game_over_mcp(client: Client, services: Services) -> None:
    policy = FocusedHindsightPolicy()
    first = await run_episode(client, GameEpisode("twc", TWC, "train", 1), GoldPolicy(), agent_id="test")
    assert first.succeeded
    while analysis_for(services).run_once().trajectories:
        pass
    result = await run_episode(client, GameEpisode("twc", TWC, "train", 2, budget=15), policy, agent_id="test")
    assert 0 < result.steps <= 15
    stored = services.capture.load("local", uuid.UUID(result.trajectory_ids["agent"]))
    assert stored.outcome is not None
    assert stored.outcome.status.value == ("success" if result.succeeded else "failure")
    # Every step hangs under the first; the game's end closes the trajectory as an execution step.
    assert len(stored.nodes) == result.steps + 1
    first, *steps, end = stored.nodes
    assert all(n.parent_id == first.node_id for n in [*steps, end])
    assert end.chosen_action == FINISH
    assert not end.is_decision
    assert end.execution_result.status.value == stored.outcome.status.value


def test_an_unknown_game_is_refused_with_the_games_message(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"Unknown game \(nosuch\)"):
        check_game("nosuch", "")
    assert main(["--games", "nosuch", "--out", str(tmp_path / "out.json")]) == 2
    assert "Unknown game (nosuch)" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_an_unknown_parameter_is_refused_with_the_games_message(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match=r"Unrecognized property name \(bogus\)"):
        check_game("twc", "numLocations=2,bogus=3")
    assert main(["--games", "twc", "--params", "numLocations=99"]) == 2
    assert "Number of locations must be less than" in capsys.readouterr().err


def test_the_test_fold_is_never_played() -> None:
    with pytest.raises(ValueError, match="fold"):
        GameEpisode("twc", TWC, "test", 0)


def _aim_rule(target: str) -> Served:
    return Served(
        template=ExperienceTemplate(
            role="agent",
            task_type="twc",
            signature="agent|twc||inventory,put|focus",
            condition=Condition(predicates=(Predicate(feature="focus", op="in", value=["black blanket"]),)),
            recommended=ActionPattern(tool="put", params={"object": "<focus>", "target": target}),
            avoid=ActionPattern(tool="put", params={"object": "<focus>", "target": "<str>"}),
            rationale="put made progress aimed here",
            confidence=0.9,
        ),
        applicable=True,
    )


def test_while_the_right_place_is_closed_the_things_other_places_are_not_explored() -> None:
    episode = GameEpisode("twc", TWC, "train", 1)
    episode.act(parse_action("take black blanket"))  # the chest of drawers is still closed
    view = episode.view()
    assert view is not None
    narrowed = episode.focused(view, "black blanket")
    elsewhere = [c for c in narrowed.options if c.action == "put"]
    assert elsewhere
    assert all(c.params["target"] != "chest of drawers" for c in elsewhere)
    policy = FocusedHindsightPolicy()
    assert policy.aimed_elsewhere([_aim_rule("chest of drawers")], narrowed, "twc") == elsewhere
    # Once its call failed in this game, the rule rules nothing out.
    policy.observe(
        narrowed,
        Decision(call=parse_action("put black blanket in chest of drawers"), source="template", template_id="t"),
        StepResult(status="failure", summary="the score fell"),
    )
    assert policy.aimed_elsewhere([_aim_rule("chest of drawers")], narrowed, "twc") == []


def test_the_placement_bound_pays_at_least_two_steps_per_wrong_tell() -> None:
    episode = GameEpisode("twc", TWC, "dev", 2)
    places = gold_places(episode)
    assert set(places.values()) <= set(offered_places(episode))
    right = measure(1.0, [2], 0, 50)[0]
    assert right.won
    assert right.steps == right.gold  # told every place right: the gold path's length
    wrong = measure(0.0, [2], 0, 50)[0]
    # Every tell wrong: each thing costs a wrong put and its take-back at least, and then wins.
    assert wrong.won
    assert wrong.steps >= right.steps + 2 * len(places)


def test_the_placement_bound_refuses_a_share_outside_0_to_1(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bound_main(["--accuracy", "1,1.5"])
    assert "every share must be from 0 to 1" in capsys.readouterr().err
