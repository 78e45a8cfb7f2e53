"""What a memory holds, and its versions: a write to a key supersedes the key's latest version."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, Field, JsonValue

from cluster.core.types import no_nul

MemoryValue = Annotated[str | dict[str, JsonValue], AfterValidator(no_nul)]
SourceId = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(no_nul)]


class MemoryState(StrEnum):
    CURRENT = "current"
    SUPERSEDED = "superseded"


def next_version(previous: int | None) -> int:
    """Versions of one (owner, scope, key) count up from 1; a write supersedes the latest."""
    return 1 if previous is None else previous + 1
