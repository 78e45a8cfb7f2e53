"""Context features: a snapshot flattened into dotted paths, as the learner and the server read it.

``{"table": {"rows": 5}}`` becomes ``table.rows``; a list becomes its length, ``len(items)``;
nesting stops at depth ``MAX_DEPTH``.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import JsonValue

Scalar = str | int | float | bool | None
Features = Mapping[str, Scalar]

MAX_DEPTH = 6


def flatten_context(value: Mapping[str, JsonValue], prefix: str = "") -> dict[str, Scalar]:
    """Flatten nested JSON into ``{dotted.path: scalar}``; lists become ``len(path)``."""
    out: dict[str, Scalar] = {}
    _flatten(value, prefix, out, 0)
    return out


def _flatten(value: object, path: str, out: dict[str, Scalar], depth: int) -> None:
    if isinstance(value, Mapping):
        if depth >= MAX_DEPTH:
            return
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            # Plain JSON scalars (most items) are stored here rather than by one more call: every
            # decision's snapshot is flattened, and the calls were over half of that time.
            kind = type(item)
            if kind is str or kind is int or kind is float or kind is bool or item is None:
                if sub:
                    out[sub] = item
            else:
                _flatten(item, sub, out, depth + 1)
    elif isinstance(value, list):
        if path:
            out[f"len({path})"] = len(value)
    elif path and (value is None or isinstance(value, str | int | float | bool)):
        out[path] = value
