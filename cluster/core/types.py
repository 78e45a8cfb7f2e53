"""Base types every model builds on: immutable values, text and JSON that the stores can hold, UTC time."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, JsonValue
from pydantic_core import PydanticCustomError


def no_nul(value: Any) -> Any:
    """Reject what SQL JSON/text columns cannot store: NUL bytes (Postgres) and NaN/infinity (JSON)."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("NUL bytes (\\x00) are not allowed in text")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("NaN and infinity are not valid JSON numbers")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            no_nul(key)
            no_nul(item)
    elif isinstance(value, list | tuple):
        for item in value:
            no_nul(item)
    return value


MAX_NAME_CHARS = 200

Text = Annotated[str, AfterValidator(no_nul)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(no_nul)]
JsonObject = Annotated[dict[str, JsonValue], AfterValidator(no_nul)]


def is_name(text: str) -> bool:
    """Whether ``text`` passes as a :data:`Name` (checked without building a model)."""
    return 0 < len(text) <= MAX_NAME_CHARS and "\x00" not in text


_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")


def date_time_text(value: Any) -> Any:
    """Refuse a number (or the text of one) where a date-time is due: pydantic would read it as a
    Unix time, so ``as_of: 1`` meant 1970 and ``true`` a second after it."""
    if isinstance(value, bool | int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise PydanticCustomError(
            "date_time_type", "Input should be an ISO 8601 date-time such as 2026-01-05T09:00:00Z"
        )
    return value


DateTime = Annotated[datetime, BeforeValidator(date_time_text)]
"""A date-time an input field takes: ISO 8601 text (or a ``datetime`` from code), never a number."""


class Frozen(BaseModel):
    """Base for domain values: immutable, and unknown fields are an error rather than silently dropped."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """The same instant in UTC; a naive value (SQLite hands them back) is taken as UTC already."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
