"""Validation errors as a model reads them: one short line per argument, and a bounded whole.

Pydantic reports one error per problem, each with the value it refused and a link to its website:
an object argument with 100,000 unknown keys answered 100,000 errors (a 0.83 MB call got a 9.5 MB
answer). Here every argument gets at most one line: where the problem is, what was wrong and what
is allowed (the first few unknown keys and a count of the rest, then the accepted ones), never the
refused value itself; at most :data:`MAX_ARGUMENTS` lines and :data:`MAX_TEXT_CHARS` characters.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

NAMED_KEYS = 3
"""Unknown keys named in an error; the rest are counted."""
MAX_ARGUMENTS = 5
"""Arguments given a line of their own; the rest are counted."""
MAX_LINE_CHARS = 300
MAX_TEXT_CHARS = 1500
MAX_NAME_CHARS = 40

_JSON_TYPES = (
    (bool, "a boolean"),
    (int, "a number"),
    (float, "a number"),
    (str, "a string"),
    (dict, "an object"),
    (list, "a list"),
    (type(None), "null"),
)


class ArgumentErrors(ValidationError):
    """A ``ValidationError`` whose text is its errors' lines: the SDK reports ``str()`` of the
    validation error that refused a call's arguments, after ``Error executing tool <name>:``."""

    def __str__(self) -> str:
        return "\n".join(str(error["msg"]) for error in self.errors(include_url=False))


def explained(exc: ValidationError, model: type[BaseModel] | None = None) -> ArgumentErrors:
    """``exc`` with one line per argument (see the module docstring); ``model`` (the one that was
    validated) lets an unknown key's line list the keys its object accepts."""
    if isinstance(exc, ArgumentErrors):
        return exc
    return ArgumentErrors.from_exception_data(
        exc.title,
        [
            # Each line keeps its argument as location: the SDK logs the names of refused arguments.
            {"type": PydanticCustomError("invalid_argument", "{line}", {"line": line}), "loc": loc, "input": None}
            for loc, line in explain(exc.errors(include_url=False), model)
        ],
        hide_input=True,
    )


def explain(
    errors: Sequence[ErrorDetails], model: type[BaseModel] | None = None
) -> list[tuple[tuple[int | str, ...], str]]:
    """The lines for ``errors``, each with its argument's location: at most one per argument,
    bounded in number and length."""
    by_argument: dict[tuple[int | str, ...], list[ErrorDetails]] = {}
    for error in errors:
        by_argument.setdefault(tuple(error["loc"][:1]), []).append(error)
    lines = [(loc, _line(errs, model)) for loc, errs in list(by_argument.items())[:MAX_ARGUMENTS]]
    if len(by_argument) > MAX_ARGUMENTS:
        lines.append(((), f"and {len(by_argument) - MAX_ARGUMENTS} more arguments with problems"))
    text_left = MAX_TEXT_CHARS
    kept: list[tuple[tuple[int | str, ...], str]] = []
    for loc, line in lines:
        if text_left <= 0:
            break
        kept.append((loc, _clip(line, min(MAX_LINE_CHARS, text_left))))
        text_left -= len(kept[-1][1]) + 1
    return kept


def unknown_keys(what: str, names: Sequence[str], accepted: Sequence[str] | None) -> str:
    """``what`` got keys it does not take: the first few named, the rest counted, the accepted listed."""
    shown = ", ".join(_clip(name, MAX_NAME_CHARS) for name in names[:NAMED_KEYS])
    more = f" and {len(names) - NAMED_KEYS} more" if len(names) > NAMED_KEYS else ""
    plural = "s" if len(names) > 1 else ""
    allowed = f" (accepted: {', '.join(accepted)})" if accepted is not None else ""
    return f"{what}{plural} {shown}{more}{allowed}"


def _line(errors: list[ErrorDetails], model: type[BaseModel] | None) -> str:
    first = errors[0]
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        parent = unknown[0]["loc"][:-1]
        names = [str(e["loc"][-1]) for e in unknown if e["loc"][:-1] == parent]
        accepted = _fields_at(model, parent) if model is not None else None
        line = f"{_path(parent)}: " + unknown_keys("unknown key", names, accepted)
        told = len(names)
    else:
        # A value of none of a union's types fails once per type: one line says them all.
        alternatives = [e for e in errors if _path(e["loc"]) == _path(first["loc"]) and _is_type_error(e)]
        if len(alternatives) > 1:
            wanted = " or ".join(str(e["msg"]).removeprefix("Input should be ") for e in alternatives)
            line = f"{_path(first['loc'])}: Input should be {wanted}, got {_json_type(first.get('input'))}"
            told = len(alternatives)
        else:
            line = _sentence(first)
            told = 1
    rest = len(errors) - told
    if rest > 0:
        argument = _path(first["loc"][:1])
        line += f" ({rest} more problem{'s' if rest > 1 else ''} in {argument})"
    return line


def _sentence(error: ErrorDetails) -> str:
    """One error as ``where: what was wrong``, without the refused value."""
    where = _path(error["loc"])
    kind = error["type"]
    if kind == "missing":
        return f"{where}: missing (required)"
    message = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if _is_type_error(error):
        message += f", got {_json_type(error.get('input'))}"
    return f"{where}: {message}" if where else message


def _is_type_error(error: ErrorDetails) -> bool:
    return error["type"].endswith("_type")


def _path(loc: tuple[int | str, ...]) -> str:
    """A location as a caller writes it (``nodes[2].execution_result.status``), without the
    type names pydantic adds for union members (``str``, ``function-after[...]``)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _is_type_tag(part):
            continue
        else:
            out += f".{_clip(part, MAX_NAME_CHARS)}" if out else _clip(part, MAX_NAME_CHARS)
    return out


def _is_type_tag(part: str) -> bool:
    return "[" in part or "-" in part or part[:1].isupper() or part in {"str", "int", "float", "bool", "dict", "list"}


def _json_type(value: Any) -> str:
    for kind, name in _JSON_TYPES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str] | None:
    """The keys the object at ``loc`` of ``model`` accepts, when it is a pydantic model."""
    annotation: Any = model
    for part in loc:
        found = _model_in(annotation)
        if isinstance(part, str) and found is not None and part in found.model_fields:
            annotation = found.model_fields[part].annotation
    found = _model_in(annotation)
    if found is None:
        return None
    return sorted(field.alias or name for name, field in found.model_fields.items())


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds: itself, or inside ``X | None``, ``list[X]``, ``Annotated``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list, tuple, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
