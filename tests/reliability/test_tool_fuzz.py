"""Property-based fuzzing of every MCP tool over real HTTP, from the tools' own JSON schemas.

The service runs as it is deployed minus Ray: the HTTP app (``cluster.http``) under uvicorn on a
loopback port, on SQLite and Milvus Lite in ``tmp_path``; calls go through the official MCP client.
For every tool Hypothesis sends arguments the schema calls valid, and valid arguments with one thing
broken (an unknown argument, a required one missing, one of another type). Whatever it sends:
no HTTP 5xx, no crash (the SDK's bare "Error executing tool X" hides the cause), and every error
names what was wrong. Sized for two cores: bounded examples, derandomized, well under a minute.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.from_thread
import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from cluster.auth import OwnerResolver
from cluster.http import build_http_app
from cluster.services import build_services
from cluster.settings import Settings
from tests.reliability.schema_strategies import SchemaStrategies
from tests.reliability.service import uvicorn_app

pytestmark = [pytest.mark.reliability, pytest.mark.milvus]

VALID_EXAMPLES = 30
BROKEN_EXAMPLES = 30
# The caller's mistakes as the tools report them (cluster.tools.common.tool_errors).
CALLER_ERRORS = ("InvalidInput", "NotFound", "Conflict", "LimitExceeded", "TrajectoryClosed")
FUZZ = settings(
    max_examples=VALID_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@dataclass
class Served:
    """The service on a port, a connected client driven from this (synchronous) test thread, and
    every HTTP status it answered."""

    call: Callable[[str, dict[str, Any]], CallToolResult]
    tools: dict[str, dict[str, Any]]
    statuses: Counter[int] = field(default_factory=Counter)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    services = build_services(Settings(data_dir=tmp_path))
    statuses: Counter[int] = Counter()

    async def record(response: httpx2.Response) -> None:
        statuses[response.status_code] += 1

    try:
        with (
            uvicorn_app(build_http_app(services, OwnerResolver({}, "local"))) as url,
            anyio.from_thread.start_blocking_portal() as portal,
        ):
            http = httpx2.AsyncClient(timeout=30, event_hooks={"response": [record]})
            client = Client(streamable_http_client(f"{url}/mcp/", http_client=http))
            with portal.wrap_async_context_manager(client) as connected:
                listed = portal.call(connected.list_tools)
                yield Served(
                    call=lambda name, args: portal.call(connected.call_tool, name, args),
                    tools={tool.name: tool.input_schema for tool in listed.tools},
                    statuses=statuses,
                )
    finally:
        services.close()


def problem_named(tool: str, schema: dict[str, Any], text: str) -> bool:
    """Whether an error text says what was wrong: a caller error with its reason, or a validation
    error that locates an argument of the tool (or names the unknown ones)."""
    body = text.removeprefix(f"Error executing tool {tool}").removeprefix(": ")
    if not body.strip():
        return False
    if re.match(rf"({'|'.join(CALLER_ERRORS)}): \S", body):
        return True
    if "unknown argument" in body:
        return True
    # A validation error: one line per argument, each starting with where the problem is.
    locations = [re.split(r"[.:\[]", line, maxsplit=1)[0] for line in body.splitlines()]
    return any(location in schema.get("properties", {}) for location in locations)


def error_text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def fuzz_valid(served: Served, name: str, schema: dict[str, Any], outcomes: Counter[str]) -> None:
    @FUZZ
    @given(args=SchemaStrategies(schema).valid())
    def call(args: dict[str, Any]) -> None:
        result = served.call(name, args)
        outcomes["error" if result.is_error else "ok"] += 1
        if result.is_error:
            assert problem_named(name, schema, error_text(result)), (name, args, error_text(result))

    call()


def fuzz_broken(served: Served, name: str, schema: dict[str, Any], outcomes: Counter[str]) -> None:
    @settings(FUZZ, max_examples=BROKEN_EXAMPLES)
    @given(case=SchemaStrategies(schema).broken())
    def call(case: tuple[str, str, dict[str, Any]]) -> None:
        how, argument, args = case
        result = served.call(name, args)
        outcomes[f"{how} {'error' if result.is_error else 'ok'}"] += 1
        if how in ("unknown", "missing"):
            assert result.is_error, (name, how, argument)
            assert argument in error_text(result), (name, how, argument, error_text(result))
        if result.is_error:
            assert problem_named(name, schema, error_text(result)), (name, args, error_text(result))

    call()


def test_every_tool_survives_arguments_its_schema_calls_valid(served: Served) -> None:
    outcomes: Counter[str] = Counter()
    for name, schema in sorted(served.tools.items()):
        fuzz_valid(served, name, schema, outcomes)
    assert sum(outcomes.values()) >= VALID_EXAMPLES * len(served.tools) // 2, outcomes
    assert outcomes["ok"] > 0, outcomes
    assert all(status < 500 for status in served.statuses), served.statuses


def test_every_tool_names_what_is_wrong_with_broken_arguments(served: Served) -> None:
    outcomes: Counter[str] = Counter()
    for name, schema in sorted(served.tools.items()):
        fuzz_broken(served, name, schema, outcomes)
    assert outcomes["unknown error"] > 0, outcomes
    assert outcomes["missing error"] > 0, outcomes
    assert all(status < 500 for status in served.statuses), served.statuses


def test_the_checks_fail_a_crash_and_an_error_that_names_nothing() -> None:
    schema = {"properties": {"key": {"type": "string"}}}
    assert not problem_named("memory_write", schema, "Error executing tool memory_write")
    assert not problem_named("memory_write", schema, "Error executing tool memory_write: something went wrong")
    assert not problem_named("memory_write", schema, "Error executing tool memory_write: other: missing (required)")
    assert problem_named("memory_write", schema, "Error executing tool memory_write: NotFound: memory 1 not found")
    assert problem_named("memory_write", schema, "Error executing tool memory_write: key: missing (required)")
