"""Decision signatures: what makes two decision points "the same situation".

A decision signature is

* the trajectory's ``role`` (a planner's decisions never pool with an executor's),
* its ``task_type`` — or, when the agent gave none, the goal's key words (lower-case words of
  three or more letters from ``context_snapshot["goal"]`` or else the task text, minus stop
  words and numbers, sorted, at most eight) so that "import 50 rows" and "import 5000 rows"
  still meet,
* the sorted set of distinct available actions, and
* the sorted top-level keys of the context snapshot (its shape, not its values).

Values are left out on purpose: they vary from run to run (row counts, file names) and are
exactly what condition learning later uses to tell success from failure within one signature.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping

from pydantic import Field, JsonValue

from actors.engine.model.trajectories import Node, Trajectory
from cluster.core.types import Frozen

MAX_KEY_CHARS = 500  # ExperienceTemplate.signature holds at most 500 characters.
MAX_GOAL_WORDS = 8
_WORD = re.compile(r"[^\W\d_]{3,}")
_STOP = frozenset(
    "the and for with from into onto then than that this these those are was were will shall "
    "should could would can may must not all any each its our your their them they you per via "
    "using use please".split()
)


class DecisionSignature(Frozen):
    """The situation a decision was made in; equal signatures pool evidence."""

    role: str
    task_type: str | None = None
    goal_words: tuple[str, ...] = Field(default=(), description="Only when task_type is absent.")
    actions: tuple[str, ...]
    context_keys: tuple[str, ...] = ()

    def key(self) -> str:
        """A stable string form, at most 500 characters (long ones end in a content hash)."""
        parts = [
            self.role,
            self.task_type or "*",
            " ".join(self.goal_words),
            ",".join(self.actions),
            ",".join(self.context_keys),
        ]
        text = "|".join(parts)
        if len(text) <= MAX_KEY_CHARS:
            return text
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return f"{text[: MAX_KEY_CHARS - 17]}#{digest}"


def goal_words(text: str) -> tuple[str, ...]:
    words = {w for w in _WORD.findall(text.lower()) if w not in _STOP}
    return tuple(sorted(words)[:MAX_GOAL_WORDS])


def situation_words(task_type: str | None, context_snapshot: Mapping[str, JsonValue], task: str) -> tuple[str, ...]:
    """The goal words a signature carries: none with a task type, else the goal's (or the task's)."""
    if task_type is not None:
        return ()
    goal = context_snapshot.get("goal")
    return goal_words(goal if isinstance(goal, str) else task)


def decision_signature(trajectory: Trajectory, node: Node) -> DecisionSignature:
    """The signature of ``node`` as a decision of ``trajectory``."""
    header = trajectory.header
    return situation_signature(
        header.role,
        header.task_type,
        situation_words(header.task_type, node.context_snapshot, header.task),
        tuple(sorted(set(node.available_actions))),
        tuple(sorted(node.context_snapshot)),
    )


@functools.lru_cache(maxsize=4096)
def situation_signature(
    role: str, task_type: str | None, words: tuple[str, ...], actions: tuple[str, ...], keys: tuple[str, ...]
) -> DecisionSignature:
    """The signature of a decision from its parts (cached: a fleet repeats a few hundred situations,
    and building the model per node dominated profiles)."""
    return DecisionSignature(role=role, task_type=task_type, goal_words=words, actions=actions, context_keys=keys)


@functools.lru_cache(maxsize=4096)
def signature_key(signature: DecisionSignature) -> str:
    """Cached :meth:`DecisionSignature.key`."""
    return signature.key()
