"""Ids an agent chooses itself: any short name for a trajectory, not only a UUID.

A model asked to invent a UUID makes one up badly or spends a turn on it; a name such as
``checkout-42`` is what it would pick. Stores key trajectories on a UUID, so a name that is not
a UUID is turned into one, the same for the same owner and name every time (a UUID5 of both):
no table of names, nothing a process keeps, and two owners using one name get two trajectories.
A UUID sent as it is stays that UUID, so every id issued before names the same trajectory.
"""

# Annotations stay eager here: the SDK reads them.
import uuid
from typing import Annotated

from pydantic import AfterValidator, Field

MAX_NAME_CHARS = 64


def printable(name: str) -> str:
    """``name`` if it has no control characters (it is shown in logs and answers) and no surrounding space."""
    if name != name.strip() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise ValueError("a trajectory name must be printable, without control characters or surrounding spaces")
    return name


TrajectoryName = Annotated[
    str,
    # The length first, so a name too long is named as one ("at most 64 characters").
    Field(
        min_length=1,
        max_length=MAX_NAME_CHARS,
        description="Your name for the task's trajectory, e.g. 'checkout-42', in each of its calls.",
    ),
    AfterValidator(printable),
]

_NAMESPACE = uuid.UUID("6f1f6b1e-4d0a-5b8e-9c1e-0d6a2f4b7c31")
"""Fixed forever: changing it would give every named trajectory a new UUID."""


def trajectory_uuid(owner: str, name: str) -> uuid.UUID:
    """The stored id of ``owner``'s trajectory ``name``: ``name`` itself when it is a UUID."""
    try:
        return uuid.UUID(name)
    except ValueError:
        return uuid.uuid5(_NAMESPACE, f"{owner}\n{name}")
