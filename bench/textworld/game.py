"""One TextWorldExpress game as a benchmark episode: its valid actions as calls, its score as results.

Reading is generic English, the same for every game: an action string is a verb, a direct
object and, after the first preposition, a target (``put black blanket in chest of drawers`` →
``put(object="black blanket", target="chest of drawers")``); the room is the place in "You are
in the …"; the inventory is the item lines of the game's inventory text, articles dropped.

A step's result comes from the game's score: it rose → ``success``; it fell, or the game says
the task failed → ``failure``; the game took the action and scored nothing → ``partial`` (the
call ran; whether it was aimed right shows only later, if ever). The summary is the game's answer.

A state is the room and the actions valid there; each visit to a state is a stage of its own
(a step that changes neither stays in the visit), so an agent never repeats a call that did
nothing in the same visit, and explores afresh the next time it comes back.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
from collections.abc import Sequence
from functools import cache
from typing import Any

from pydantic import JsonValue

from cluster.core.types import canonical_json
from cluster.demo.env_base import Call, Episode, StepResult, StepView, fail

PREPOSITIONS = ("in", "on", "into", "onto", "with", "from", "to", "at", "under")
ARTICLES = ("a", "an", "the", "some")
MAX_LISTED = 12
"""Inventory and visible things in a snapshot: at most this many each (the rest is dropped)."""
TASK_CHARS = 200
FOLDS = ("train", "dev")
"""The folds the project runs; the test fold is never played."""
_ROOM = re.compile(r"You are in the ([^.]+)\.")


class GameUnavailable(RuntimeError):
    """No Java runtime, or the textworld-express package is not installed."""


def available() -> str | None:
    """Why the games cannot run here (None: they can)."""
    if shutil.which("java") is None:
        return "no Java runtime on PATH (TextWorldExpress runs on the JVM)"
    try:
        import textworld_express  # noqa: F401
    except ImportError:
        return "textworld-express is not installed (pip install -e '.[textworld]')"
    return None


def missing() -> bool:
    """Whether the games cannot run here, said on stderr for a command to exit with status 2."""
    reason = available()
    if reason is not None:
        print(f"cannot run TextWorldExpress games: {reason}", file=sys.stderr)
    return reason is not None


@cache
def engine() -> Any:
    """The process's one game engine (a JVM behind py4j): starting it takes seconds, a reset does not."""
    reason = available()
    if reason is not None:
        raise GameUnavailable(reason)
    from textworld_express import TextWorldExpressEnv

    return TextWorldExpressEnv(envStepLimit=1000)


def parse_action(text: str) -> Call:
    """An action string as a call: verb, object, and the target after the first preposition."""
    words = text.split()
    if not words:
        raise ValueError("empty action")
    verb, rest = words[0], words[1:]
    params: dict[str, JsonValue] = {}
    cut = next((i for i, w in enumerate(rest) if w in PREPOSITIONS and i > 0), None)
    head, tail = (rest, []) if cut is None else (rest[:cut], rest[cut + 1 :])
    if head:
        params["object"] = " ".join(head)
    if tail:
        params["target"] = " ".join(tail)
    return Call(action=verb, params=params)


def _key(call: Call) -> str:
    return canonical_json([call.action, call.params])


def _items(inventory: str) -> list[str]:
    out = []
    for line in inventory.splitlines()[1:]:
        item = line.strip()
        if not item or item.endswith("."):
            continue  # a sentence ("Your inventory is currently empty."), not an item
        first, _, rest = item.partition(" ")
        out.append(rest if first.lower() in ARTICLES and rest else item)
    return out


class GameEpisode(Episode):
    """One seeded game of one fold.

    Args:
        game: A TextWorldExpress game name (``twc``, ``cookingworld``, …).
        params: The game's parameter string (``numLocations=2,numItemsToPutAway=3``).
        fold: ``train`` or ``dev``.
        seed: The game's seed within its fold.
        budget: Steps allowed.

    Raises:
        ValueError: An unknown game or parameter set (the game's own message), or another fold.
        GameUnavailable: No Java or no textworld-express here.
    """

    default_budget = 50
    steps_stand_alone = True

    def __init__(self, game: str, params: str, fold: str, seed: int, budget: int | None = None) -> None:
        if fold not in FOLDS:
            raise ValueError(f"fold must be one of {FOLDS}, not {fold!r}")
        self.family = game
        self.task_type = game
        super().__init__(seed, budget)
        self.env = engine()
        try:
            self.gold: tuple[str, ...] = self._gold(game, params, fold, seed)
            _, info = self.env.reset(seed=seed, gameFold=fold, gameName=game, gameParams=params)
        except ValueError as exc:  # the game's own message names what is wrong
            raise ValueError(" ".join(str(exc).split())) from None
        self._info: dict[str, Any] = info
        self._visits: dict[str, int] = {}
        self._lost = False
        self._stepped = False
        self._calls: dict[str, tuple[Call, str]] = {}
        self.stage = self._enter()

    def _gold(self, game: str, params: str, fold: str, seed: int) -> tuple[str, ...]:
        """The game's gold path, played until the game says the task is done.

        The game's sequence opens with "look around" (what a reset already shows) and may go on
        after the win; neither is a step an agent needs.
        """
        self.env.reset(seed=seed, gameFold=fold, gameName=game, gameParams=params, generateGoldPath=True)
        path: list[str] = []
        for action in self.env.getGoldActionSequence()[1:]:
            path.append(action)
            _, _, _, info = self.env.step(action)
            if info.get("tasksuccess"):
                break
        return tuple(path)

    @property
    def task(self) -> str:
        return str(self._info["taskDescription"])

    def oracle_steps(self) -> float:
        """The gold path's length (:meth:`_gold`)."""
        return float(len(self.gold))

    @property
    def points(self) -> float:
        """The share of the game's points the play has now, as the game gives it (1 when won; it
        falls below 0 when things were taken from their places): how far a lost game got."""
        return float(self._info.get("score", 0.0))

    @property
    def succeeded(self) -> bool:
        return bool(self._info.get("tasksuccess"))

    @property
    def done(self) -> bool:
        return self.succeeded or self._lost or self.steps >= self.budget

    def _state(self) -> str:
        valid = "\n".join(sorted(self._info["validActions"]))
        return f"{self._room()}#{hashlib.sha256(valid.encode()).hexdigest()[:8]}"

    def _enter(self) -> str:
        state = self._state()
        self._visits[state] = self._visits.get(state, 0) + 1
        self._calls = {_key(call): (call, a) for a in sorted(self._info["validActions"]) if (call := parse_action(a))}
        return f"{state}@{self._visits[state]}"

    def _room(self) -> str:
        match = _ROOM.search(str(self._info.get("look", "")))
        return match.group(1) if match else ""

    def _context(self, focus: str = "") -> dict[str, JsonValue]:
        things = sorted({str(v) for c, _ in self._calls.values() for v in c.params.values()})
        inventory = _items(str(self._info.get("inventory", "")))
        return {
            "task": self.task[:TASK_CHARS],
            "room": self._room(),
            "inventory": list(inventory[:MAX_LISTED]),
            "visible": list(things[:MAX_LISTED]),
            "focus": focus,
            "focus_held": bool(focus) and focus in inventory,
        }

    def _view(self, stage: str) -> StepView:
        options = tuple(c for c, _ in self._calls.values())
        actions = tuple(dict.fromkeys(c.action for c in options))
        return StepView(stage=stage, role="agent", context=self._context(), available_actions=actions, options=options)

    def recorded_view(self, view: StepView, call: Call) -> StepView:
        """The view with the thing the call acts on as its focus: where its aim is decided."""
        return self.focused(view, str(call.params.get("object", "")))

    def focused(self, view: StepView, focus: str) -> StepView:
        """The view narrowed to one thing: its focus in the snapshot, the calls acting on it as options.

        Its available actions are the verbs acting on the thing and those acting on nothing
        (``inventory``): what can be done with a held blanket is the same decision in every
        room, whether or not something else there can be opened or taken, so its lessons pool.
        """
        on = tuple(c for c in view.options if c.params.get("object", "") == focus)
        if not on:
            return view.model_copy(update={"context": self._context(focus)})
        free = tuple(c for c in view.options if "object" not in c.params)
        actions = tuple(dict.fromkeys(c.action for c in (*on, *free)))
        return view.model_copy(update={"context": self._context(focus), "options": on, "available_actions": actions})

    def _judge(self, stage: str, call: Call) -> StepResult:
        text = self._calls.get(_key(call), (call, None))[1]
        self._stepped = text is not None
        if text is None:
            return fail(f"not a valid action here: {call.action} {call.params}")
        before = float(self._info["scoreRaw"])
        _, _, _, info = self.env.step(text)
        self._info = info
        answer = " ".join(str(info["observation"]).split())[:160]
        if info.get("taskfailure"):
            self._lost = True
            return StepResult(status="failure", summary=f"task failed: {answer}")
        delta = float(info["scoreRaw"]) - before
        if delta > 0:
            return StepResult(status="success", summary=answer)
        return StepResult(status="failure" if delta < 0 else "partial", summary=answer)

    def _next(self, stage: str, call: Call) -> str | None:
        if self.succeeded:
            return None
        return stage if stage.startswith(f"{self._state()}@") else self._enter()

    def act(self, call: Call) -> StepResult:
        """One game step; the state moves whatever the result (a partial step changes the world too)."""
        stage = self.stage or ""
        result = super().act(call)
        if self.stage == stage and self._stepped and not self.done and not stage.startswith(f"{self._state()}@"):
            self.stage = self._enter()
        return result


def options_on(view: StepView) -> Sequence[str]:
    """The things some valid call acts on, in the view's order, those with a choice of calls only."""
    counts: dict[str, int] = {}
    for call in view.options:
        focus = call.params.get("object")
        if isinstance(focus, str):
            counts[focus] = counts.get(focus, 0) + 1
    return [f for f, n in counts.items() if n > 1]
