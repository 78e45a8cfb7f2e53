"""Validation errors answered as a model reads them: one bounded line per argument."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from cluster.tools.errors import MAX_ARGUMENTS, MAX_TEXT_CHARS, ArgumentErrors, explained


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str
    size: int = 0


class Call(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inner: Inner | None = None
    items: list[Inner] = []
    value: str | dict[str, int] = ""


def refusal(data: dict[str, Any], model: type[BaseModel] = Call) -> ArgumentErrors:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    return explained(caught.value, model)


def test_unknown_keys_are_named_up_to_three_then_counted_with_the_accepted_keys() -> None:
    error = refusal({"inner": {"kind": "a", **{f"x{i}": i for i in range(1000)}}})
    assert str(error) == "inner: unknown keys x0, x1, x2 and 997 more (accepted: kind, size)"
    # The argument stays the error's location (the SDK logs refused argument names).
    assert [e["loc"] for e in error.errors()] == [("inner",)]


def test_one_line_per_argument_with_a_count_of_the_rest() -> None:
    error = refusal({"items": [{"kind": 1, "size": "big"} for _ in range(100)], "value": 3})
    assert str(error).splitlines() == [
        "items[0].kind: Input should be a valid string, got a number (199 more problems in items)",
        "value: Input should be a valid string or a valid dictionary, got a number",
    ]


def test_the_text_carries_no_refused_value_and_no_link() -> None:
    text = str(refusal({"inner": {"kind": "k", "size": "y" * 100_000}}))
    assert "yyyy" not in text
    assert "http" not in text
    assert text == "inner.size: Input should be a valid integer, unable to parse string as an integer"


def test_the_whole_text_is_bounded() -> None:
    fields = {f"f{i}": (str, ...) for i in range(50)}
    wide = type("Wide", (BaseModel,), {"__annotations__": dict.fromkeys(fields, str)})
    error = refusal({}, wide)
    lines = str(error).splitlines()
    assert len(lines) == MAX_ARGUMENTS + 1
    assert lines[-1] == f"and {50 - MAX_ARGUMENTS} more arguments with problems"
    long_key = {"inner": {"kind": "a", "k" * 5000: 1}}
    assert len(str(refusal(long_key))) <= MAX_TEXT_CHARS


def test_a_missing_field_is_named_with_its_path() -> None:
    assert str(refusal({"inner": {"size": 1}})) == "inner.kind: missing (required)"
