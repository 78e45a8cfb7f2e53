"""A tool function becomes a published tool: its docstring is the description, the values it names
are filled in, and its arguments refuse what it does not declare."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import Field, ValidationError

from cluster.metrics import Metrics
from cluster.tools.registry import AtMost, published_tool


async def count_things(
    things: Annotated[list[str], Field(min_length=1, description="At most {max_things}."), AtMost("max_things")],
    verbose: bool = False,
) -> int:
    """Count things. Sends back how many; at most
    {max_things} are counted."""
    return len(things)


async def undocumented(x: int) -> int:
    return x


@pytest.fixture
def metrics() -> Metrics:
    # Without a shared directory the counters stay in this process.
    return Metrics()


def test_the_description_is_the_docstring_on_one_line_with_the_values_it_names(metrics: Metrics) -> None:
    tool = published_tool(count_things, metrics, {"max_things": 3})
    assert tool.name == "count_things"
    assert tool.description == "Count things. Sends back how many; at most 3 are counted."
    things = tool.parameters["properties"]["things"]
    assert things["description"] == "At most 3."
    assert (things["minItems"], things["maxItems"]) == (1, 3)


def test_a_length_limit_from_the_values_is_enforced(metrics: Metrics) -> None:
    tool = published_tool(count_things, metrics, {"max_things": 3})
    assert tool.fn_metadata.validate_arguments({"things": ["a", "b", "c"]})["things"] == ["a", "b", "c"]
    with pytest.raises(ValidationError, match="at most 3 items"):
        tool.fn_metadata.validate_arguments({"things": ["a", "b", "c", "d"]})


def test_arguments_the_tool_does_not_declare_are_refused_by_name(metrics: Metrics) -> None:
    tool = published_tool(count_things, metrics, {"max_things": 3})
    assert tool.parameters["additionalProperties"] is False
    with pytest.raises(ValidationError, match=r"unknown arguments owner, topk \(accepted: things, verbose\)"):
        tool.fn_metadata.validate_arguments({"things": ["a"], "owner": "bob", "topk": 2})


def test_a_value_the_registration_does_not_have_is_an_error_at_registration(metrics: Metrics) -> None:
    with pytest.raises(KeyError, match="max_things"):
        published_tool(count_things, metrics, {})


def test_a_tool_without_a_docstring_is_refused(metrics: Metrics) -> None:
    with pytest.raises(ValueError, match="undocumented has no docstring"):
        published_tool(undocumented, metrics, {})
