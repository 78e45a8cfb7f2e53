"""Generalization: turn the concrete tool calls behind a template into a reusable pattern.

Tool names and parameter structure stay; values are generalized across all the evidence runs:

* CSS id selectors (``#submit-btn``) become attribute selectors (``[type=submit]``) when the
  context or params describe the element (a mapping whose ``id`` matches, with a ``type``,
  ``name``, ``role``, ``aria-label``, ``data-testid`` or ``placeholder``), else ``<css_selector>``;
* URLs → ``<url>``; file paths → ``<path>``, or ``<csv_path>`` when every run's file had the
  same extension; e-mail addresses → ``<email>``; uuids, long hex strings and values of
  ``*id`` keys → ``<id>``; text longer than 64 characters → ``<text>``;
* numbers equal to the same context feature in every run → ``<feature>`` (e.g. ``<row_count>``);
  otherwise kept when equal in every run, else ``<int>`` / ``<number>``;
* other strings and booleans equal in every run are kept (small enums such as
  ``encoding="utf-8"``), else ``<str>`` / ``<bool>``.

Keys missing from some runs are dropped: the pattern is the structure all the evidence shares.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence

from pydantic import JsonValue

from actors.engine.conditions import flatten_context

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://\S+$")
_EMAIL = re.compile(r"^[^@\s/]+@[^@\s/]+\.[a-zA-Z]{2,}$")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"^(?=.*\d)[0-9a-fA-F]{12,}$")
_CSS_ID = re.compile(r"^([a-zA-Z][a-zA-Z0-9-]*)?#([A-Za-z_][\w-]*)$")
_FILE_EXT = re.compile(r"\.([A-Za-z0-9]{1,8})$")
_PATHLIKE = re.compile(r"^(~|\.{1,2})?[/\\]|^[A-Za-z]:\\|[/\\][^/\\\s]+[/\\]?|^[\w.-]+\.[A-Za-z0-9]{1,8}$")
_ID_KEY = re.compile(r"(?:^|_)(?i:id)$|(?<=[a-z])Id$|^(?i:uuid)$")
SELECTOR_ATTRIBUTES = ("type", "name", "role", "aria-label", "data-testid", "placeholder")
MAX_CONSTANT_CHARS = 64

Sample = tuple[Mapping[str, JsonValue], Mapping[str, JsonValue]]
"""One evidence run: ``(action_params, context_snapshot)``."""


def generalize_params(samples: Sequence[Sample]) -> dict[str, JsonValue]:
    """Generalize the parameters of several runs of one tool into a single pattern.

    Args:
        samples: ``(params, context)`` of each evidence run, in a fixed order.

    Returns:
        A parameter mapping with placeholders where the runs differ or carry run-specific values.
    """
    if not samples:
        return {}
    flat_contexts = [flatten_context(ctx) for _, ctx in samples]
    return _mapping([p for p, _ in samples], samples, flat_contexts)


def _mapping(
    values: Sequence[Mapping[str, JsonValue]], samples: Sequence[Sample], flats: Sequence[Mapping[str, object]]
) -> dict[str, JsonValue]:
    keys = set(values[0])
    for value in values[1:]:
        keys &= set(value)
    return {key: _value(key, [v[key] for v in values], samples, flats) for key in sorted(keys)}


def _value(
    key: str, values: list[JsonValue], samples: Sequence[Sample], flats: Sequence[Mapping[str, object]]
) -> JsonValue:
    if all(isinstance(v, Mapping) for v in values):
        return _mapping([v for v in values if isinstance(v, Mapping)], samples, flats)
    if all(isinstance(v, bool) for v in values):
        return values[0] if len(set(values)) == 1 else "<bool>"
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return _number(key, values, flats)
    if all(isinstance(v, str) for v in values):
        return _string(key, [v for v in values if isinstance(v, str)], samples)
    if all(v is None for v in values):
        return None
    if all(isinstance(v, list) for v in values):
        return values[0] if all(v == values[0] for v in values) and _safe_constant(values[0]) else "<list>"
    return "<value>"


def _number(key: str, values: list[JsonValue], flats: Sequence[Mapping[str, object]]) -> JsonValue:
    if _ID_KEY.search(key):
        return "<id>"
    # A value that tracks a context feature in every run is that feature, not a constant.
    shared = set.intersection(
        *(
            {f for f, x in flat.items() if x == v and not isinstance(x, bool)}
            for flat, v in zip(flats, values, strict=True)
        )
    )
    if shared and len(values) > 1 and len(set(values)) > 1:
        return f"<{sorted(shared, key=lambda f: (len(f), f))[0]}>"
    if len(set(values)) == 1:
        return values[0]
    return "<int>" if all(isinstance(v, int) for v in values) else "<number>"


def _string(key: str, values: list[str], samples: Sequence[Sample]) -> JsonValue:
    kinds = [string_kind(key, v) for v in values]
    kind = kinds[0] if len(set(kinds)) == 1 else None
    if kind == "css_id":
        selectors = {_attribute_selector(v, params, ctx) for v, (params, ctx) in zip(values, samples, strict=True)}
        one = selectors.pop() if len(selectors) == 1 else None
        return one or "<css_selector>"
    if kind == "path":
        exts = {m.group(1).lower() if (m := _FILE_EXT.search(v)) else "" for v in values}
        ext = exts.pop() if len(exts) == 1 else ""
        return f"<{ext}_path>" if ext else "<path>"
    if kind is not None and kind != "plain":
        return f"<{kind}>"
    if any(k not in ("plain", "css_id") for k in kinds):
        return "<str>"
    return values[0] if len(set(values)) == 1 else "<str>"


def string_kind(key: str, value: str) -> str:
    """Classify a string value: url, email, id, css_id, path, text or plain."""
    if _URL.match(value):
        return "url"
    if _EMAIL.match(value):
        return "email"
    if _ID_KEY.search(key) or _UUID.search(value) or _HEX.match(value):
        return "id"
    if _CSS_ID.match(value):
        return "css_id"
    if _PATHLIKE.search(value) and " " not in value.strip():
        return "path"
    if len(value) > MAX_CONSTANT_CHARS:
        return "text"
    return "plain"


def _attribute_selector(selector: str, params: Mapping[str, JsonValue], ctx: Mapping[str, JsonValue]) -> str | None:
    match = _CSS_ID.match(selector)
    if match is None:
        return None
    # Context first: it describes the page; params rarely carry more than the selector itself.
    for element in _elements(match.group(2), [ctx, params]):
        attrs: dict[str, JsonValue] = dict(element)
        for nested in ("attributes", "attrs"):
            extra = element.get(nested)
            if isinstance(extra, Mapping):
                attrs.update(extra)
        for name in SELECTOR_ATTRIBUTES:
            value = attrs.get(name)
            if isinstance(value, str) and value and string_kind(name, value) == "plain" and '"' not in value:
                return f"[{name}={value}]" if re.fullmatch(r"[\w-]+", value) else f'[{name}="{value}"]'
    return None


def _elements(element_id: str, roots: list[object]) -> Iterator[Mapping[str, JsonValue]]:
    """Depth-first, every mapping that describes the element with this id."""
    stack: list[object] = list(reversed(roots))
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            if item.get("id") == element_id or item.get("selector") == f"#{element_id}":
                yield item
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))


def _safe_constant(value: JsonValue) -> bool:
    if isinstance(value, str):
        return string_kind("", value) == "plain"
    if isinstance(value, list):
        return all(_safe_constant(v) for v in value)
    if isinstance(value, Mapping):
        return all(not _ID_KEY.search(k) and _safe_constant(v) for k, v in value.items())
    return True


_SANITIZE = (
    (re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://\S+"), "<url>"),
    (_UUID, "<id>"),
    (re.compile(r"\b(?=\w*\d)[0-9a-fA-F]{12,}\b"), "<id>"),
    (re.compile(r"(?<![\w])(~|\.{1,2})?/[^\s'\"]+"), "<path>"),
    (re.compile(r"#[A-Za-z_][\w-]*"), "<css_selector>"),
)


def sanitize_text(text: str, limit: int = 160) -> str:
    """Strip run-specific ids, URLs and paths from free text (error summaries) before it goes in a template."""
    for pattern, replacement in _SANITIZE:
        text = pattern.sub(replacement, text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
