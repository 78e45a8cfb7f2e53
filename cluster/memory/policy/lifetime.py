"""How long a memory is valid: the lifetime a writer asks for, and when a stored one is in effect."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Self

from pydantic import Field, StrictInt, model_validator

from cluster.core.errors import InvalidInput
from cluster.core.types import DateTime, Frozen, as_utc
from cluster.memory.policy.scope import MemoryScope

MAX_TTL_SECONDS = 100 * 366 * 24 * 3600
"""A window longer than a century is a mistake (or permanent); beyond it dates overflow."""


class TtlKind(StrEnum):
    PERMANENT = "permanent"
    SESSION = "session"
    WINDOW = "window"


class Ttl(Frozen):
    """How long a memory is valid: for good, until its session ends, or within a time window.

    A window is ``[valid_from, valid_until)``; give ``valid_until`` or ``seconds`` (counted from
    ``valid_from``, or from the write when that is empty). A window that starts in the future is
    "not yet in effect" and is filtered out like an expired one.
    """

    kind: TtlKind = Field(default=TtlKind.PERMANENT, description="permanent, session or window.")
    valid_from: DateTime | None = Field(default=None, description="Window start; default the write time.")
    valid_until: DateTime | None = Field(default=None, description="Window end (exclusive).")
    seconds: StrictInt | None = Field(
        default=None, ge=1, le=MAX_TTL_SECONDS, description="Window length, instead of valid_until (at most 100 years)."
    )

    @model_validator(mode="after")
    def _window_is_bounded(self) -> Self:
        if self.kind is TtlKind.WINDOW:
            if (self.valid_until is None) == (self.seconds is None):
                raise ValueError("a window ttl needs exactly one of valid_until or seconds")
            if self.valid_until is not None and self.valid_from is not None:
                if as_utc(self.valid_until) <= as_utc(self.valid_from):
                    raise ValueError("valid_until must be after valid_from")
        elif self.valid_from is not None or self.valid_until is not None or self.seconds is not None:
            raise ValueError(f"{self.kind} ttl takes no valid_from, valid_until or seconds")
        return self

    @classmethod
    def permanent(cls) -> Ttl:
        return cls()

    @classmethod
    def session(cls) -> Ttl:
        return cls(kind=TtlKind.SESSION)

    @classmethod
    def window(cls, seconds: int, valid_from: datetime | None = None) -> Ttl:
        return cls(kind=TtlKind.WINDOW, seconds=seconds, valid_from=valid_from)


class Validity(Frozen):
    """When a stored memory is in effect: ``[valid_from, expires_at)``; no end means until further notice."""

    valid_from: datetime
    expires_at: datetime | None
    session_bound: bool = Field(description="Expires when its scope's session ends.")


def validity_for(ttl: Ttl, scope: MemoryScope, now: datetime) -> Validity:
    """Turn a ttl into concrete times at write time.

    A session ttl needs a session to be bound to; it stays open until ``end_session`` closes it.
    """
    if ttl.kind is TtlKind.SESSION:
        if scope.session_id is None:
            raise InvalidInput("a session ttl needs a scope with a session_id (session scope, or task in a session)")
        return Validity(valid_from=now, expires_at=None, session_bound=True)
    if ttl.kind is TtlKind.WINDOW:
        start = as_utc(ttl.valid_from) if ttl.valid_from is not None else now
        end = as_utc(ttl.valid_until) if ttl.valid_until is not None else start + timedelta(seconds=ttl.seconds or 0)
        if end <= now:
            raise InvalidInput("the ttl window has already ended")
        return Validity(valid_from=start, expires_at=end, session_bound=False)
    return Validity(valid_from=now, expires_at=None, session_bound=False)


def is_valid_at(valid_from: datetime, expires_at: datetime | None, moment: datetime) -> bool:
    """The temporal filter: in effect at ``moment`` (started, not yet expired)."""
    return as_utc(valid_from) <= moment and (expires_at is None or moment < as_utc(expires_at))


def was_current_at(created_at: datetime, superseded_at: datetime | None, moment: datetime) -> bool:
    """Version visibility for ``as_of``: the version had been written and not yet replaced."""
    return as_utc(created_at) <= moment and (superseded_at is None or moment < as_utc(superseded_at))
