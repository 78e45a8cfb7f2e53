"""Generalization: turn the concrete tool calls behind a template into a reusable pattern.

Tool names and parameter structure stay; values are generalized across all the evidence runs:

* CSS id selectors (``#submit-btn``) become attribute selectors (``[type=submit]``) when the
  context or params describe the element (a mapping whose ``id`` matches, with a ``type``,
  ``name``, ``role``, ``aria-label``, ``data-testid`` or ``placeholder``), else ``<css_selector>``.
  Runs that mix ids with one attribute selector keep that selector when every id's element
  carries the attribute (agents that followed ``[type=submit]`` next to ones that clicked ids);
* other CSS selectors (``table.prices``, ``[name=q]``, ``form > button``) are never paths: kept
  when equal in every run, else ``<css_selector>``;
* typed values (:func:`value_kind`, checked on the whole string, before paths: a date, a
  fraction or a MIME type holds a slash and is no path): ``date``, ``time``, ``datetime``,
  ``duration``, ``mime_type``, ``ratio``, ``version``, ``number``. Named after the context
  feature holding the value in every run, even where it never varied (the items of one task
  share its version; the next task's situation holds its own), but a number two runs used stays
  a constant (numbers coincide); else a MIME type, version, ratio, duration or number every run
  used is kept verbatim, a date or time two or more runs used too; else typed (``<version>``);
* URLs: named after the context feature holding them in every run, else kept verbatim when two
  or more runs used the same one (an endpoint is a constant of the tool), else ``<url>``;
* file paths → ``<path>``, or ``<csv_path>`` when every run's file had the
  same extension (a real one: it starts with a letter, so ``x.2026`` is just ``<path>``);
  e-mail addresses → ``<email>``; uuids, long hex strings and values of ``*id`` keys →
  ``<id>``; text longer than 64 characters → ``<text>``. These name one thing in one
  environment (a machine's file, a person), so they are placeholders even when every run used
  the same one;
* numbers equal to the same context feature in every run → ``<feature>`` (e.g. ``<row_count>``);
  otherwise kept when equal in every run, else ``<int>`` / ``<number>``;
* strings equal to the same context string in every run (a feature, or an item of a list
  feature: ``tables: [...]`` names it ``<table>``) → that feature, when the runs differ or the
  value is a per-instance token (``staging_88ac38``: a hex/digit suffix), even from one run;
  a token found nowhere in the context → ``<id>``;
* other strings and booleans equal in every run are kept (small enums such as
  ``encoding="utf-8"``), else ``<str>`` / ``<bool>``. No pattern value is ever ``""``.

Keys missing from some runs are dropped: the pattern is the structure all the evidence shares.
No placeholder is ever made of a fragment of a value. The result does not depend on the order
of the samples.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence

from pydantic import JsonValue

from actors.engine.features import flatten_context

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://\S+$")
_EMAIL = re.compile(r"^[^@\s/]+@[^@\s/]+\.[a-zA-Z]{2,}$")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"^(?=.*\d)[0-9a-fA-F]{12,}$")
_CSS_ID = re.compile(r"^([a-zA-Z][a-zA-Z0-9-]*)?#([A-Za-z_][\w-]*)$")
_FILE_EXT = re.compile(r"\.([A-Za-z][A-Za-z0-9]{0,7})$")
_PATHLIKE = re.compile(r"^(~|\.{1,2})?[/\\]|^[A-Za-z]:\\|[/\\][^/\\\s]+[/\\]?|^[\w.-]+\.[A-Za-z0-9]{1,8}$")
# tag.class, [attr=..], combinators; a bare tag.ext with a known file extension stays a path.
_CSS_SIMPLE = r"(?:[a-zA-Z][a-zA-Z0-9-]*|\*)?(?:[.#][A-Za-z_][\w-]*|\[[^\]\[]+\]|::?[a-z-]+(?:\([^)]*\))?)*"
_CSS = re.compile(rf"^{_CSS_SIMPLE}(?:\s*[>+~ ]\s*{_CSS_SIMPLE})*$")
_ATTR_SELECTOR = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9-]*)?\[\s*([\w-]+)\s*=\s*(['\"]?)([^'\"\]]+)\2\s*\]$")
_COMBINATOR = re.compile(r"\s*[>+~]\s*|\s+")
_TAG = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9-]*|\*)")
_TOKEN = re.compile(r"[_-](?=[0-9a-fA-F]*\d)[0-9a-fA-F]{4,}$")
_HTML_TAGS = frozenset(
    "a abbr article aside b body button canvas caption code dd details dialog div dl dt em fieldset figure footer "
    "form h1 h2 h3 h4 h5 h6 header i iframe img input label legend li main nav ol option p pre section select "
    "span strong summary svg table tbody td textarea tfoot th thead tr ul".split()
)
_FILE_EXTS = frozenset(
    "avro bin bz2 cfg conf csv db doc docx gif gz htm html ini jpeg jpg js json jsonl log md parquet pdf png "
    "py sh sql sqlite svg tar tsv txt xls xlsx xml yaml yml zip".split()
)
_ID_KEY = re.compile(r"(?:^|_)(?i:id)$|(?<=[a-z])Id$|^(?i:uuid)$")
VALUE_KINDS = frozenset({"datetime", "date", "time", "duration", "mime_type", "ratio", "version", "number"})
"""Kinds of value that mean the same in any run (a MIME type, a version, ...): kept when constant."""
SITUATION_KINDS = frozenset({"datetime", "date", "time"})
"""Value kinds that usually come from the situation: named after the context when found there."""
CONSTANT_KINDS = frozenset({"plain", "css"}) | (VALUE_KINDS - SITUATION_KINDS)
"""Kinds a list item may have for the whole list to be kept as a constant."""
SELECTOR_ATTRIBUTES = ("type", "name", "role", "aria-label", "data-testid", "placeholder")
MAX_CONSTANT_CHARS = 64

Sample = tuple[Mapping[str, JsonValue], Mapping[str, JsonValue]]
"""One evidence run: ``(action_params, context_snapshot)``."""


def generalize_params(
    samples: Sequence[Sample], flat_contexts: Sequence[Mapping[str, object]] | None = None
) -> dict[str, JsonValue]:
    """Generalize the parameters of several runs of one tool into a single pattern.

    Args:
        samples: ``(params, context)`` of each evidence run, in a fixed order.
        flat_contexts: Each sample's context already flattened (:func:`flatten_context`), when
            the caller has it; flattened here otherwise.

    Returns:
        A parameter mapping with placeholders where the runs differ or carry run-specific values.
    """
    if not samples:
        return {}
    if flat_contexts is None:
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
    # Runs that differ, or a single run, whose value the situation holds: the situation's value, not a
    # constant (``add_item(rows=50)`` for a file of 50 rows is ``rows=<row_count>``).
    if shared and not _repeated_number(values):
        return f"<{sorted(shared, key=lambda f: (len(f), f))[0]}>"
    if len(set(values)) == 1:
        return values[0]
    return "<int>" if all(isinstance(v, int) for v in values) else "<number>"


def _repeated_number(values: Sequence[JsonValue]) -> bool:
    """Two runs or more used one number: a constant, even where a context feature holds it too.

    Small numbers coincide (``part_mb=16`` where ``threads`` is 16), so only a number seen once,
    or numbers that differ, are read off the situation; JSON numbers and numeric strings alike.
    """
    return len(values) > 1 and len(set(values)) == 1


def _string(key: str, values: list[str], samples: Sequence[Sample]) -> JsonValue:
    kinds = [string_kind(key, v) for v in values]
    kind = kinds[0] if len(set(kinds)) == 1 else None
    if set(kinds) <= {"css_id", "css"}:
        return _selector(values, kinds, samples)
    if kind == "url":
        return _url(values, samples)
    if kind == "path":
        exts = {m.group(1).lower() if (m := _FILE_EXT.search(v)) else "" for v in values}
        ext = exts.pop() if len(exts) == 1 else ""
        return f"<{ext}_path>" if ext else "<path>"
    if kind in VALUE_KINDS:
        return _typed_value(kind, values, samples)
    if set(kinds) <= {"plain", "token"}:
        # A run-specific value (a token, or one that differs between runs) named by the context.
        if "token" in kinds or len(set(values)) > 1:
            feature = _context_feature(values, [ctx for _, ctx in samples])
            if feature is not None:
                return f"<{feature}>"
            return "<id>" if "token" in kinds else "<str>"
        return values[0] if values[0] else "<str>"
    if kind is not None and kind != "plain":
        return f"<{kind}>"
    return "<str>"


def _typed_value(kind: str, values: list[str], samples: Sequence[Sample]) -> str:
    """A date, MIME type, version, ...: named after the context feature holding it in every run,
    else verbatim where every run used it, else a typed placeholder.

    A value the situation holds in every run is read off the situation, even if it never varied:
    the calls behind a template are often the items of one task, all with the task's own version
    or date, and the next task's situation holds its own (a version ``11.10.5`` read off the
    context, not a fixed one). Read off the context, a value that is the same everywhere is still
    the right one. Otherwise dates and times come from the situation, so one seen in one run only
    is no evidence of a constant; other kinds (MIME types, versions, ratios, durations, numbers)
    mean the same in any run and are kept whenever they are constant. A number the situation
    holds in every run is the exception: small numbers coincide (``part_mb=16`` where
    ``threads`` is 16), so one used in two runs or more stays a constant.
    """
    feature = _context_feature(values, [ctx for _, ctx in samples])
    constant = len(set(values)) == 1
    if feature is not None and not (kind == "number" and _repeated_number(values)):
        return f"<{feature}>"
    if kind in SITUATION_KINDS:
        return values[0] if constant and len(values) > 1 else f"<{kind}>"
    return values[0] if constant else f"<{kind}>"


def _url(values: list[str], samples: Sequence[Sample]) -> str:
    """Named after the context feature holding it in every run; else kept verbatim when two or more
    runs used the same one (an endpoint is a constant of the tool: a placeholder would make the
    follower guess among the situation's URLs); else ``<url>``."""
    feature = _context_feature(values, [ctx for _, ctx in samples])
    if feature is not None:
        return f"<{feature}>"
    return values[0] if len(set(values)) == 1 and len(values) > 1 else "<url>"


def _selector(values: list[str], kinds: list[str], samples: Sequence[Sample]) -> str:
    """One selector for every run, or ``<css_selector>``; never an empty string."""
    others = {v for v, k in zip(values, kinds, strict=True) if k == "css"}
    if not others:
        selectors = {_attribute_selector(v, params, ctx) for v, (params, ctx) in zip(values, samples, strict=True)}
        one = selectors.pop() if len(selectors) == 1 else None
        return one or "<css_selector>"
    if len(others) > 1:
        return "<css_selector>"
    (selector,) = others
    if "css_id" not in kinds:
        return selector
    attr = _ATTR_SELECTOR.match(selector)
    if attr is None:
        return "<css_selector>"
    name, value = attr.group(1), attr.group(3)
    ids = [(v, s) for v, k, s in zip(values, kinds, samples, strict=True) if k == "css_id"]
    if all(_carries(v, params, ctx, name, value) for v, (params, ctx) in ids):
        return f"[{name}={value}]" if re.fullmatch(r"[\w-]+", value) else f'[{name}="{value}"]'
    return "<css_selector>"


def _carries(
    selector: str, params: Mapping[str, JsonValue], ctx: Mapping[str, JsonValue], name: str, value: str
) -> bool:
    """The element an id selector picks has attribute ``name`` equal to ``value``."""
    match = _CSS_ID.match(selector)
    return match is not None and any(
        _element_attributes(element).get(name) == value for element in _elements(match.group(2), [ctx, params])
    )


def _element_attributes(element: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    attrs: dict[str, JsonValue] = dict(element)
    for nested in ("attributes", "attrs"):
        extra = element.get(nested)
        if isinstance(extra, Mapping):
            attrs.update(extra)
    return attrs


def context_strings(context: Mapping[str, JsonValue]) -> dict[str, set[str]]:
    """Every string in a context snapshot by feature name: dotted paths, list items by the singular list name.

    ``{"tables": ["staging_1"], "file": {"name": "a"}}`` → ``{"table": {"staging_1"}, "file.name": {"a"}}``.
    """
    out: dict[str, set[str]] = {}
    stack: list[tuple[str, object]] = [("", context)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, Mapping):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in item.items())
        elif isinstance(item, list):
            leaf = path.rsplit(".", 1)[-1]
            name = leaf[:-1] if len(leaf) > 3 and leaf.endswith("s") and not leaf.endswith("ss") else f"{leaf}_item"
            stack.extend((name, v) for v in item)
        elif isinstance(item, str) and item and path:
            out.setdefault(path, set()).add(item)
    return out


def _context_feature(values: Sequence[str], contexts: Sequence[Mapping[str, JsonValue]]) -> str | None:
    """The context feature that holds each run's value in every run (shortest name, then alphabetical)."""
    shared: set[str] | None = None
    for value, ctx in zip(values, contexts, strict=True):
        names = {name for name, found in context_strings(ctx).items() if value in found}
        shared = names if shared is None else shared & names
        if not shared:
            return None
    return sorted(shared, key=lambda f: (len(f), f))[0] if shared else None


@functools.lru_cache(maxsize=16_384)
def string_kind(key: str, value: str) -> str:
    """Classify a string value (first match wins, in this order). Cached: condition learning asks
    about the same values of a batch's evidence for every candidate test, and profiles of a fleet's
    batches put a third of attribution in these regular expressions.

    ``url``, ``email``, ``id`` (uuid, long hex, or a value of an ``*id`` key), ``datetime``,
    ``date``, ``time``, ``duration``, ``mime_type``, ``ratio`` (``16/9``, ``3:4``), ``version``,
    ``number`` (``3.5``, ``1,200``, ``40%``), ``css_id``, ``css``, ``path``, ``text`` (long),
    ``token`` (a word with a per-instance suffix) or ``plain``. The value types come before
    paths: a date, a fraction or a MIME type holds a slash and is no file path.
    """
    if _URL.match(value):
        return "url"
    if _EMAIL.match(value):
        return "email"
    if _ID_KEY.search(key) or _UUID.search(value) or _HEX.match(value):
        return "id"
    detected = value_kind(key, value)
    if detected is not None:
        return detected
    if _CSS_ID.match(value):
        return "css_id"
    if is_css_selector(value):
        return "css"
    if _PATHLIKE.search(value) and " " not in value.strip():
        return "path"
    if len(value) > MAX_CONSTANT_CHARS:
        return "text"
    if _TOKEN.search(value):
        return "token"
    return "plain"


_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_DATE_ISO = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})$|^(\d{4})/(\d{1,2})/(\d{1,2})$|^(\d{4})(\d{2})(\d{2})$")
_DATE_DMY = re.compile(r"^(\d{1,2})([/.-])(\d{1,2})\2(\d{2}|\d{4})$")
_DATE_WORDS = re.compile(
    rf"^(?:\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH},?\s+\d{{4}}|{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}})$",
    re.IGNORECASE,
)
_TIME = re.compile(
    r"^([01]?\d|2[0-3]):([0-5]\d)(?::([0-5]\d)(?:\.\d+)?)?(?:\s*([AaPp][Mm]))?$|^(1[0-2]|0?[1-9])\s*[AaPp][Mm]$"
)
_ZONE = r"(?:Z|[+-]\d{2}:?\d{2})?"
_DATETIME = re.compile(
    rf"^\d{{4}}-\d{{2}}-\d{{2}}[T ]\d{{2}}:\d{{2}}(?::\d{{2}}(?:\.\d+)?)?{_ZONE}$|^\d{{8}}T\d{{4,6}}{_ZONE}$"
)
_DURATION_ISO = re.compile(r"^P(?!$)(\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+(?:\.\d+)?S)?)?$")
_DURATION_UNIT = r"(?:ms|msec|s|sec|secs|seconds?|m|min|mins|minutes?|h|hr|hrs|hours?|d|days?|w|wks?|weeks?)"
_DURATION = re.compile(rf"^(?:\d+(?:\.\d+)?\s*{_DURATION_UNIT}\s*)+$", re.IGNORECASE)
_MIME_TOP = "application|audio|example|font|haptics|image|message|model|multipart|text|video|chemical|\\*"
_MIME = re.compile(rf"^(?:{_MIME_TOP}|x-[\w-]+)/(?:[\w][\w.+-]*|\*)(?:\s*;\s*[\w-]+=[\w.\"-]+)*$", re.IGNORECASE)
_RATIO = re.compile(r"^\d+(?:\.\d+)?\s*[/:]\s*\d+(?:\.\d+)?$")
_RATIO_KEY = re.compile(r"ratio|aspect|scale|odds|fraction|share|proportion", re.IGNORECASE)
_VERSION = re.compile(r"^[vV]\d+(?:\.\d+)*(?:[-+][0-9A-Za-z.-]+)?$|^\d+\.\d+\.\d+(?:\.\d+)?(?:[-+][0-9A-Za-z.-]+)?$")
_NUMBER = re.compile(r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][+-]?\d+)?%?$")


def value_kind(key: str, value: str) -> str | None:
    """The typed value a string holds (date, time, MIME type, ratio, ...), or None.

    Checked on the whole string only: a value is one thing, never its fragments.
    """
    text = value.strip()
    if not text or len(text) > MAX_CONSTANT_CHARS:
        return None
    if _DATETIME.match(text):
        return "datetime"
    if _is_date(text):
        return "date"
    if _TIME.match(text) and not (_RATIO_KEY.search(key) and _RATIO.match(text)):
        return "time"
    if _DURATION_ISO.match(text) or _DURATION.match(text):
        return "duration"
    if _MIME.match(text) and not _FILE_EXT_OF_PATH.search(text):
        return "mime_type"
    if _RATIO.match(text):
        return "ratio"
    if _VERSION.match(text):
        return "version"
    if any(c.isdigit() for c in text) and _NUMBER.match(text):
        return "number"
    return None


_FILE_EXT_OF_PATH = re.compile(rf"\.(?:{'|'.join(sorted(_FILE_EXTS))})$", re.IGNORECASE)


def _is_date(text: str) -> bool:
    if _DATE_WORDS.match(text):
        return True
    iso = _DATE_ISO.match(text)
    if iso:
        year, month, day = (int(g) for g in iso.groups() if g is not None)
        return 1 <= month <= 12 and 1 <= day <= 31 and 1000 <= year <= 9999
    dmy = _DATE_DMY.match(text)
    if dmy and not (dmy.group(2) == "." and len(dmy.group(4)) != 4):  # 1.2.10 is a version
        a, b = int(dmy.group(1)), int(dmy.group(3))
        # Day first or month first: either reading must be a real day and month.
        return (1 <= a <= 31 and 1 <= b <= 12) or (1 <= a <= 12 and 1 <= b <= 31)
    return False


def is_css_selector(value: str) -> bool:
    """A CSS selector other than a bare ``#id``: ``table.prices``, ``[type=submit]``, ``ul > li``.

    Every compound must start with an HTML tag, ``*`` or nothing, and something must mark it as
    a selector (a class, id, attribute, pseudo-class or combinator), so ``Create account`` is
    text. ``tag.ext`` is a path when ``ext`` is a common file extension (``main.py``).
    """
    if not value or "/" in value or "\\" in value or not _CSS.match(value.strip()):
        return False
    compounds = [c for c in _COMBINATOR.split(value.strip()) if c]
    tails = []
    for compound in compounds:
        tag = _TAG.match(compound)
        name = tag.group(0) if tag else ""
        if name not in ("", "*") and name.lower() not in _HTML_TAGS:
            return False
        tails.append(compound[len(name) :])
    if not any(tails) and len(compounds) < 2:  # one bare tag is a word
        return False
    if len(compounds) == 1 and not any(c in value for c in "[#:") and value.count(".") == 1:
        return value.rsplit(".", 1)[-1].lower() not in _FILE_EXTS
    return True


def _attribute_selector(selector: str, params: Mapping[str, JsonValue], ctx: Mapping[str, JsonValue]) -> str | None:
    match = _CSS_ID.match(selector)
    if match is None:
        return None
    # Context first: it describes the page; params rarely carry more than the selector itself.
    for element in _elements(match.group(2), [ctx, params]):
        attrs = _element_attributes(element)
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
        return string_kind("", value) in CONSTANT_KINDS
    if isinstance(value, list):
        return all(_safe_constant(v) for v in value)
    if isinstance(value, Mapping):
        return all(not _ID_KEY.search(k) and _safe_constant(v) for k, v in value.items())
    return True


def fits_pattern(
    pattern: Mapping[str, JsonValue], params: Mapping[str, JsonValue], context: Mapping[str, JsonValue]
) -> bool:
    """Whether one call is an instance of a generalized pattern (see :func:`generalize_params`).

    One notion of "fits" for distillation, retirement and serving: a call fits when the pattern
    could have been generalized from it. Key by key, a placeholder fits anything; a constant
    fits the value the call sent (a date ``"14.03.2026"`` kept verbatim because several runs
    used it fits a call that sends it again), or what the call generalizes to on its own
    (``#<id of the submit button>`` fits ``[type=submit]``: its element carries the attribute).
    A made-up ``#id``, another button's id or ``encoding="utf-16"`` against ``"utf-8"`` do not
    fit. A key of the pattern the call lacks does not fit. So every call a pattern was
    generalized from fits it.
    """
    single: dict[str, JsonValue] | None = None

    def alone() -> Mapping[str, JsonValue]:
        nonlocal single  # generalizing the call is the costly part: only when a constant differs
        if single is None:
            single = generalize_params([(params, context)])
        return single

    return _fits(pattern, params, alone, params, context)


def _fits(
    pattern: Mapping[str, JsonValue],
    raw: Mapping[str, JsonValue],
    alone: Callable[[], Mapping[str, JsonValue]],
    params: Mapping[str, JsonValue],
    context: Mapping[str, JsonValue],
) -> bool:
    for key, want in pattern.items():
        if key not in raw:
            return False
        got = raw[key]
        if want == got or (isinstance(want, str) and _PLACEHOLDER.match(want)):
            continue
        if isinstance(want, Mapping) and isinstance(got, Mapping):
            if _fits(want, got, _nested(alone, key), params, context):
                continue
            return False
        if isinstance(want, str) and isinstance(got, str) and _selects(want, got, params, context):
            continue
        if alone().get(key) != want:
            return False
    return True


def _nested(alone: Callable[[], Mapping[str, JsonValue]], key: str) -> Callable[[], Mapping[str, JsonValue]]:
    def inner() -> Mapping[str, JsonValue]:
        value = alone().get(key)
        return value if isinstance(value, Mapping) else {}

    return inner


def _selects(selector: str, value: str, params: Mapping[str, JsonValue], context: Mapping[str, JsonValue]) -> bool:
    """An id selector whose element carries the attribute an attribute selector names."""
    attr = _ATTR_SELECTOR.match(selector)
    return attr is not None and _carries(value, params, context, attr.group(1), attr.group(3))


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


_PLACEHOLDER = re.compile(r"^<[^<>]+>$")


def merge_params(old: Mapping[str, JsonValue], new: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    """Combine the patterns of two templates merged into one, so the result fits both bodies of evidence.

    Equal values stay; a placeholder beats a concrete value (it is the more general of the two);
    two different placeholders become ``<path>`` (both paths) or ``<value>``; two different
    concrete values are generalized as two runs without context. Keys missing from either side
    are dropped, and an empty string never comes out.
    """
    return {key: _merge_value(key, old[key], new[key]) for key in sorted(set(old) & set(new))}


def _merge_value(key: str, a: JsonValue, b: JsonValue) -> JsonValue:
    if a == b:
        return "<str>" if a == "" else a
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return merge_params(a, b)
    holders = [v for v in (a, b) if isinstance(v, str) and _PLACEHOLDER.match(v)]
    if len(holders) == 2:
        return "<path>" if all(h.endswith("path>") for h in holders) else "<value>"
    if holders:
        return holders[0]
    return _value(key, [a, b], [({}, {}), ({}, {})], [{}, {}])
