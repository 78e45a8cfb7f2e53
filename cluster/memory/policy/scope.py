"""Who a memory belongs to below its owner: the user, a session or a task."""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import Field, model_validator

from cluster.core.types import Frozen, Name


class ScopeKind(StrEnum):
    USER = "user"
    SESSION = "session"
    TASK = "task"


class MemoryScope(Frozen):
    """Who a memory belongs to below the owner.

    Long-term facts and preferences belong to the user (the owner itself, so no further id);
    session state keys on the session id and task state on the task id. A task may also name the
    session it runs in, so session-bound task state can expire with the session.
    """

    kind: ScopeKind = Field(default=ScopeKind.USER, description="user, session or task.")
    session_id: Name | None = Field(default=None, description="Required for session scope.")
    task_id: Name | None = Field(default=None, description="Required for task scope.")

    @model_validator(mode="after")
    def _ids_match_kind(self) -> Self:
        if self.kind is ScopeKind.USER and (self.session_id or self.task_id):
            raise ValueError("user scope takes no session_id or task_id: long-term facts key on the user")
        if self.kind is ScopeKind.SESSION and (self.session_id is None or self.task_id is not None):
            raise ValueError("session scope needs a session_id and no task_id")
        if self.kind is ScopeKind.TASK and self.task_id is None:
            raise ValueError("task scope needs a task_id")
        return self

    @property
    def key(self) -> str:
        """The scope part of a memory's identity: ``user``, ``session:<id>`` or ``task:<id>``."""
        if self.kind is ScopeKind.SESSION:
            return f"session:{self.session_id}"
        if self.kind is ScopeKind.TASK:
            return f"task:{self.task_id}"
        return "user"

    @classmethod
    def user(cls) -> MemoryScope:
        return cls()

    @classmethod
    def session(cls, session_id: str) -> MemoryScope:
        return cls(kind=ScopeKind.SESSION, session_id=session_id)

    @classmethod
    def task(cls, task_id: str, session_id: str | None = None) -> MemoryScope:
        return cls(kind=ScopeKind.TASK, task_id=task_id, session_id=session_id)
