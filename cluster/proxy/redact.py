"""Secrets out of recorded arguments: values under a key that matches a pattern are replaced."""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"


def redact(value: Any, keys: re.Pattern[str]) -> Any:
    """A copy of ``value`` (JSON) in which every object member whose key matches ``keys`` (searched,
    so ``apiKey`` matches ``api[_-]?key``) holds :data:`REDACTED`, at any depth."""
    if isinstance(value, dict):
        return {k: REDACTED if keys.search(str(k)) else redact(v, keys) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(item, keys) for item in value]
    return value
