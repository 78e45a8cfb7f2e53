"""Hypothesis strategies from a tool's JSON schema: arguments it declares valid, and ways to break them.

Covers the part of JSON Schema that pydantic emits for the tools (``type``, ``anyOf``, ``enum``,
``$ref`` into ``$defs``, string/number/array bounds, string patterns, ``uuid`` and ``date-time``
formats, objects with ``properties``/``required``/``additionalProperties``). hypothesis-jsonschema
would do this, but its last release (0.23.1) fails against the Hypothesis this project pins; a
keyword outside the subset fails loudly here rather than being skipped.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import strategies as st

JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text()
ANY_JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_IGNORED = {"title", "description", "default", "examples"}
_KNOWN = _IGNORED | {
    "type",
    "anyOf",
    "enum",
    "const",
    "$ref",
    "$defs",
    "format",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "items",
    "minItems",
    "maxItems",
    "properties",
    "required",
    "additionalProperties",
}


class SchemaStrategies:
    """Strategies for one tool's input schema (its ``$defs`` resolve ``$ref`` everywhere in it)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self._defs: dict[str, Any] = schema.get("$defs", {})

    def valid(self, node: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
        node = self.schema if node is None else node
        unknown = set(node) - _KNOWN
        assert not unknown, f"schema keywords this generator does not know: {unknown}"
        if "$ref" in node:
            return self.valid(self._defs[node["$ref"].removeprefix("#/$defs/")])
        if "anyOf" in node:
            return st.one_of([self.valid(option) for option in node["anyOf"]])
        if "enum" in node:
            return st.sampled_from(node["enum"])
        if "const" in node:
            return st.just(node["const"])
        kind = node.get("type")
        if kind is None:
            return ANY_JSON  # e.g. pydantic's JsonValue: any JSON at all
        return _BY_TYPE[kind](self, node)

    def _string(self, node: dict[str, Any]) -> st.SearchStrategy[Any]:
        if node.get("format") == "uuid":
            return st.uuids().map(str)
        if node.get("format") == "date-time":
            return st.datetimes(min_value=datetime(1970, 1, 2), timezones=st.just(UTC)).map(datetime.isoformat)
        low, high = node.get("minLength", 0), min(node.get("maxLength", 40), 40)
        if "pattern" in node:
            return st.from_regex(node["pattern"], fullmatch=True).filter(lambda text: low <= len(text) <= high)
        return st.text(min_size=low, max_size=high)

    def _integer(self, node: dict[str, Any]) -> st.SearchStrategy[Any]:
        low = node.get("minimum", node.get("exclusiveMinimum", -(2**31) - 1) + 1)
        high = node.get("maximum", node.get("exclusiveMaximum", 2**31 + 1) - 1)
        return st.integers(low, high)

    def _number(self, node: dict[str, Any]) -> st.SearchStrategy[Any]:
        return st.floats(
            node.get("minimum", node.get("exclusiveMinimum")),
            node.get("maximum", node.get("exclusiveMaximum")),
            exclude_min="exclusiveMinimum" in node,
            exclude_max="exclusiveMaximum" in node,
            allow_nan=False,
            allow_infinity=False,
        )

    def _array(self, node: dict[str, Any]) -> st.SearchStrategy[Any]:
        low = node.get("minItems", 0)
        return st.lists(self.valid(node.get("items", {})), min_size=low, max_size=min(node.get("maxItems", 4), low + 4))

    def _object(self, node: dict[str, Any]) -> st.SearchStrategy[Any]:
        properties: dict[str, Any] = node.get("properties", {})
        required = set(node.get("required", ()))
        fixed = st.fixed_dictionaries(
            {name: self.valid(properties[name]) for name in sorted(required)},
            optional={name: self.valid(sub) for name, sub in sorted(properties.items()) if name not in required},
        )
        extra = node.get("additionalProperties", True)
        if extra is False or properties:
            return fixed
        values = ANY_JSON if extra is True else self.valid(extra)
        return st.dictionaries(st.text(max_size=12), values, max_size=4)

    def broken(self) -> st.SearchStrategy[tuple[str, str, dict[str, Any]]]:
        """(how, the argument broken, the arguments): valid arguments with one thing wrong."""
        properties: dict[str, Any] = self.schema.get("properties", {})
        ways = [
            st.tuples(st.text(min_size=1, max_size=12).filter(lambda k: k not in properties), ANY_JSON).flatmap(
                lambda extra: self.valid().map(lambda args: ("unknown", extra[0], {**args, extra[0]: extra[1]}))
            )
        ]
        for name in self.schema.get("required", ()):
            ways.append(
                self.valid().map(lambda args, n=name: ("missing", n, {k: v for k, v in args.items() if k != n}))
            )
        if properties:
            ways.append(
                st.tuples(st.sampled_from(sorted(properties)), ANY_JSON).flatmap(
                    lambda change: self.valid().map(lambda args: ("retyped", change[0], {**args, change[0]: change[1]}))
                )
            )
        return st.one_of(ways)


_BY_TYPE = {
    "string": SchemaStrategies._string,
    "integer": SchemaStrategies._integer,
    "number": SchemaStrategies._number,
    "boolean": lambda self, node: st.booleans(),
    "null": lambda self, node: st.none(),
    "array": SchemaStrategies._array,
    "object": SchemaStrategies._object,
}
