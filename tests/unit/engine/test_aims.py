"""Aims (:mod:`actors.engine.aims`): where a tool must be aimed, learned per value against all the others."""

from __future__ import annotations

from actors.engine import attribute_batch
from actors.engine.model.templates import ExperienceTemplate
from actors.engine.model.trajectories import Trajectory
from tests.unit.engine.builders import Builder

PLACES = {
    "black blanket": "chest of drawers",
    "plaid blanket": "chest of drawers",
    "handsoap": "sink",
    "soap bar": "sink",
}
ACTIONS = ["put", "inventory"]


def _game(run: int, puts: list[tuple[str, str]], *, won: bool) -> Trajectory:
    """A game recorded as the text-game bench records it: every step under the first, closed by its end.

    Each put scores (success) when the thing goes to its place and loses the point (failure)
    otherwise; the game is lost or won as ``won`` says, after all the puts.
    """
    b = Builder(role="agent", task_type="tidy", task="Put things in their usual places")
    root = b.add("look", context={"room": "bedroom", "focus": "around"})
    for thing, target in puts:
        b.add(
            "put",
            ACTIONS,
            parent=root,
            status="success" if PLACES[thing] == target else "failure",
            params={"object": thing, "target": target},
            context={"room": ("bedroom", "bathroom")[run // 2 % 2], "focus": thing, "focus_held": True},
        )
    b.add("finish", parent=root, status="success" if won else "failure")
    return b.build("success" if won else "failure")


def _aims(templates: list[ExperienceTemplate]) -> dict[str, ExperienceTemplate]:
    """The aim templates (put preferred and put avoided) by the target they recommend."""
    out = {}
    for t in templates:
        if t.recommended.tool == "put" and t.avoid is not None and t.avoid.tool == "put":
            target = t.recommended.params.get("target")
            assert isinstance(target, str)
            out[target] = t
    return out


def _runs() -> list[Trajectory]:
    wrong = {"chest of drawers": "sink", "sink": "bed"}
    runs = []
    for run in range(8):
        things = sorted(PLACES)[run % 2 :: 2]
        puts = [(t, wrong[PLACES[t]]) for t in things] + [(t, PLACES[t]) for t in things]
        runs.append(_game(run, puts, won=run % 4 == 0))  # most games lost: the puts still scored
    return runs


def test_each_aim_is_learned_for_the_things_it_was_right_for() -> None:
    templates = [t for r in attribute_batch(_runs()) for t in r.templates]
    aims = _aims(templates)
    assert set(aims) == {"chest of drawers", "sink"}
    drawers, sink = aims["chest of drawers"], aims["sink"]
    (condition,) = drawers.condition.predicates
    assert condition.feature == "focus"
    assert set(condition.value if isinstance(condition.value, list) else [condition.value]) <= {
        "black blanket",
        "plaid blanket",
    }
    assert drawers.recommended.params["object"] == "<focus>"
    (condition,) = sink.condition.predicates
    assert condition.feature == "focus"
    assert set(condition.value if isinstance(condition.value, list) else [condition.value]) <= {"handsoap", "soap bar"}


def test_a_lost_game_does_not_teach_to_avoid_the_puts_that_scored() -> None:
    lost = [_game(run, [(t, PLACES[t]) for t in sorted(PLACES)], won=False) for run in range(4)]
    wrong = [_game(run, [("handsoap", "bed"), ("black blanket", "sink")], won=False) for run in range(4, 8)]
    templates = [t for r in attribute_batch([*lost, *wrong]) for t in r.templates]
    avoiding_put = [t for t in templates if t.avoid is not None and t.avoid.tool == "put"]
    assert avoiding_put
    # Every template against a put recommends a put aimed elsewhere: none says "avoid put" as such.
    assert all(t.recommended.tool == "put" for t in avoiding_put)
    assert set(_aims(templates)) == {"chest of drawers", "sink"}
