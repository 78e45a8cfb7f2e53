"""The proxy's config file: the upstream servers in the ``mcpServers`` shape MCP clients use, plus
how and where to record.

A client's own config can be copied in as it is: ``mcpServers`` entries with ``command`` (and
``args``, ``env``, ``cwd``) start a program over stdio, entries with ``url`` (and ``headers``)
connect over Streamable HTTP. The ``hindsight`` block is the proxy's own.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cluster.core.errors import InvalidInput

DEFAULT_REDACT = r"(?i)(pass(word|wd)?|secret|token|api[_-]?key|auth(orization)?|credential|cookie|private[_-]?key)"
"""Argument keys whose values never reach the store (matched anywhere in the key, any nesting)."""


class UpstreamSpec(BaseModel):
    """One ``mcpServers`` entry: a program to start over stdio, or a Streamable HTTP URL."""

    # Clients put their own keys here (type, disabled, autoApprove, ...): ignore them rather than refuse.
    model_config = ConfigDict(extra="ignore", frozen=True)

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a program to start over stdio) or url (Streamable HTTP)")
        return self


class RecordingSpec(BaseModel):
    """Where the proxy records and what it puts in each trajectory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = Field(
        default=None,
        description="hindsight's MCP endpoint, e.g. http://127.0.0.1:8000/mcp/; none: run hindsight in process.",
    )
    token: str | None = Field(default=None, description="Bearer token for url.")
    agent_id: str = Field(default="mcp-proxy", min_length=1, max_length=200)
    role: str = Field(default="agent", min_length=1, max_length=200)
    task: str = Field(
        default="MCP session",
        min_length=1,
        max_length=4000,
        description="Task of a trajectory nobody named (hindsight_begin or _meta name it).",
    )
    task_type: str | None = Field(default=None, max_length=200)
    redact: str = Field(default=DEFAULT_REDACT, description="Regex over argument keys whose values are not stored.")
    recent_calls: int = Field(default=5, ge=0, le=50, description="Calls the default context snapshot lists.")
    max_context_bytes: int = Field(default=2048, ge=64, description="The service's max_context_bytes.")
    max_node_field_bytes: int = Field(
        default=8192, ge=64, description="The service's max_node_field_bytes: recorded arguments are cut to it."
    )
    call_timeout_s: float = Field(default=60.0, gt=0, description="An upstream call longer than this is hung.")
    idle_finalize_s: float = Field(default=600.0, gt=0, description="An untouched trajectory closes after this.")
    drain_s: float = Field(
        default=10.0, ge=0, description="On stop, how long records still queued may take to reach hindsight."
    )
    relay: bool = Field(
        default=True,
        description="Over stdio, answer plain tool calls of stdio upstreams by relaying their JSON "
        "(cluster/proxy/relay.py); false: every call through the SDK's server and client.",
    )
    advice: Literal["tool", "descriptions", "off"] = Field(
        default="tool",
        description="tool: offer hindsight_advice; descriptions: append served experience to the tools' "
        "descriptions when they are listed; off: neither.",
    )

    @field_validator("redact")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
        return value


class ProxyConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    servers: dict[str, UpstreamSpec] = Field(alias="mcpServers", min_length=1)
    hindsight: RecordingSpec = Field(default_factory=RecordingSpec)

    @field_validator("servers")
    @classmethod
    def _plain_names(cls, value: dict[str, UpstreamSpec]) -> dict[str, UpstreamSpec]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
                raise ValueError(f"server name {name!r}: use 1-64 letters, digits, '_', '-' or '.'")
        return value


def load_config(path: Path) -> ProxyConfig:
    """Read and check a config file; every problem is one :class:`InvalidInput` naming the field."""
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read it ({exc.strerror})") from exc
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path}: not JSON ({exc})") from exc
    try:
        return ProxyConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'the file'}: {err['msg']}" for err in exc.errors()
        )
        raise InvalidInput(f"{path}: {problems}") from exc
