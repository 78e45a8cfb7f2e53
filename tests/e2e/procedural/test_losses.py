"""The loss breakdown reads real runs: nothing is advised before anything is learned, and its sums hold."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bench.procedural.generated.report import RunConfig
from bench.procedural.losses import CAUSES, Losses, Visit, breakdown, main, trace


def test_round_one_is_explored_and_later_rounds_follow_advice(tmp_path: Path) -> None:
    config = RunConfig(families=3, seed_start=0, train_episodes=2, eval_episodes=2, rounds=2, conditions=("hindsight",))

    async def both() -> tuple[list[Visit], list[Visit]]:
        first = await trace(config, 1, tmp_path / "one")
        second = await trace(config, 2, tmp_path / "two")
        return first, second

    first, second = anyio.run(both)
    # Before round 1 nothing was learned: no call is advice, so no visit is charged to advice.
    assert first
    assert all(s.source == "explore" for v in first for s in v.steps)
    assert {v.cause for v in first} <= {"right", "explored", "right call failed"}
    # After a round of learning, advice is followed somewhere.
    assert any(s.source == "template" for v in second for s in v.steps)
    for visits in (first, second):
        for v in visits:
            assert v.steps
            assert v.extra >= 0
            assert v.cause != "right" or v.extra == 0
            # A visit ends at its first call that worked.
            assert all(not s.worked for s in v.steps[:-1])
        losses = breakdown(visits, 3, 2)
        assert [r.cause for r in losses.causes] == list(CAUSES)
        assert sum(r.visits for r in losses.causes) == losses.visits == len(visits)
        assert sum(r.extra_steps for r in losses.causes) == losses.extra_steps == sum(v.extra for v in visits)


def test_the_command_refuses_a_round_it_does_not_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--rounds", "2", "--round", "3", "--out", str(tmp_path / "x.json")]) == 2
    assert "--round must be between 1 and 2" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_the_command_writes_what_it_prints(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "losses.json"
    argv = ["--families", "2", "--rounds", "1", "--train", "1", "--eval", "1", "--out", str(out)]
    assert main([*argv, "--data-dir", str(tmp_path / "data")]) == 0
    losses = Losses.model_validate_json(out.read_text(encoding="utf-8"))
    assert losses.round == 1
    assert losses.families == 2
    assert f"{losses.visits} decision visits" in capsys.readouterr().out
