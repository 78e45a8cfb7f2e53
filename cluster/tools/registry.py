"""How a tool function becomes a published MCP tool: its description, strict arguments and timing.

A tool is a module-level async function (cluster/tools/<concept>.py). :func:`published_tool` makes
the SDK's ``Tool`` of it for :func:`cluster.tools.build_server`:

- the description is the function's docstring, its line breaks read as spaces; a ``{name}`` in it,
  or in an argument's description, is the value :func:`published` gives ``name`` (a setting a model
  should know, such as the default ``top_k``), and ``AtMost(name)`` on an argument caps its length
  at that value;
- the arguments are the SDK's own model of the signature, made to refuse arguments it does not
  declare (:func:`known_arguments_only`);
- every call is counted and timed under the tool's name (``Metrics.timed``);
- what is published is lean (:func:`lean_schema`, no output schema): every tool list is read by a
  model on every turn.

Every tool takes only the arguments it declares: the SDK's argument models drop unknown ones
without a word, so a client sending ``owner`` or a misspelt ``topk`` would never learn that its call
did not do what it meant. The strict model refuses them, and the published schema says
``additionalProperties: false``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Self, cast

from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp_types import CallToolResult
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator
from pydantic.config import ExtraValues
from pydantic_core import PydanticCustomError

from cluster.experience.models import MAX_CANDIDATES
from cluster.experience.models import MAX_TOP_K as MAX_EXPERIENCES
from cluster.metrics import Metrics
from cluster.settings import Settings
from cluster.tools.common import answer
from cluster.tools.errors import explained, unknown_keys

ToolFunction = Callable[..., Awaitable[Any]]


def published(settings: Settings) -> dict[str, object]:
    """The values tool texts name as ``{name}`` and ``AtMost(name)`` refers to, by name."""
    return {
        "max_trajectory_nodes": settings.max_trajectory_nodes,
        "max_context_bytes": settings.max_context_bytes,
        "max_node_field_bytes": settings.max_node_field_bytes,
        "max_query_bytes": settings.max_query_bytes,
        "experience_top_k": settings.experience_top_k,
        "max_experiences": MAX_EXPERIENCES,
        "confidence_threshold": settings.confidence_threshold,
        "max_below_threshold": MAX_CANDIDATES,
        "max_turn_bytes": settings.memory.max_value_bytes,
        "promotion_min_gap": duration(settings.memory.promotion.min_gap),
    }


@dataclass(frozen=True)
class AtMost:
    """Caps an argument's length (``max_length``) at the published value ``name``.

    For a limit taken from the settings, which a module-level signature cannot hold itself.
    """

    name: str


def published_tool(fn: ToolFunction, metrics: Metrics, values: Mapping[str, object]) -> Tool:
    """The SDK's tool for ``fn``: described by its docstring, strict arguments, timed.

    Raises:
        ValueError: ``fn`` has no docstring.
        KeyError: a text or ``AtMost`` names a value ``values`` does not have.
    """
    if not fn.__doc__:
        raise ValueError(f"tool {fn.__name__} has no docstring: it is what the model reads")
    description = " ".join(fn.__doc__.split()).format_map(values)
    # No output schema: it is most of what a tool list weighs (bench/tool_list_size.py) and no
    # client needs it to read an answer; the structured content is sent all the same.
    tool = Tool.from_function(
        structured_answers(metrics.timed(fn.__name__)(fn)), description=description, structured_output=False
    )
    known_arguments_only(tool, values)
    return tool


def structured_answers(fn: ToolFunction) -> ToolFunction:
    """``fn``, its model answers sent as compact JSON text plus the same as structured content.

    What the SDK sends for a returned model when the tool publishes an output schema, without
    the schema (the SDK sends a tool without one only the text).
    """

    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> Any:
        result = await fn(*args, **kwargs)
        if isinstance(result, BaseModel) and not isinstance(result, CallToolResult):
            return answer(result, result.model_dump_json())
        return result

    return call


class _KnownArgumentsOnly(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def refuse_unknown_arguments(cls, data: Any) -> Any:
        # Before field validation, so the caller reads one message that names the unknown arguments
        # and lists the accepted ones, instead of one "extra inputs" line per argument.
        if isinstance(data, dict):
            accepted = sorted(field.alias or name for name, field in cls.model_fields.items())
            unknown = sorted(set(data) - set(accepted))
            if unknown:
                raise PydanticCustomError(
                    "unknown_argument", "{text}", {"text": unknown_keys("unknown argument", unknown, accepted)}
                )
        return data

    @classmethod
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        extra: ExtraValues | None = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Self:
        """The SDK validates a call's arguments here and answers ``str()`` of the error: it is
        made one short line per argument (:mod:`cluster.tools.errors`)."""
        try:
            return super().model_validate(
                obj,
                strict=strict,
                extra=extra,
                from_attributes=from_attributes,
                context=context,
                by_alias=by_alias,
                by_name=by_name,
            )
        except ValidationError as exc:
            raise explained(exc, cls) from None


def known_arguments_only(tool: Tool, values: Mapping[str, object]) -> None:
    """Make ``tool`` refuse arguments it does not declare, naming them and the accepted ones.

    The SDK validates a call with ``tool.fn_metadata.arg_model`` and publishes ``tool.parameters``
    (both read at each use); both are replaced by a subclass of its model that forbids extra keys,
    so every field, alias and default stays the SDK's own. Arguments whose description names a
    published value, or that carry ``AtMost``, are redeclared there with the value filled in.
    """
    base = tool.fn_metadata.arg_model
    filled: dict[str, Any] = {}
    for name, field in base.model_fields.items():
        changes: dict[str, Any] = {}
        if field.description is not None and "{" in field.description:
            changes["description"] = field.description.format_map(values)
        for limit in field.metadata:
            if isinstance(limit, AtMost):
                changes["max_length"] = values[limit.name]
        if changes:
            # The SDK's field first, so everything not changed here stays as it declared it.
            filled[name] = Annotated[field.annotation, field, Field(**changes)]
    strict = cast(type[ArgModelBase], create_model(base.__name__, __base__=(base, _KnownArgumentsOnly), **filled))
    tool.fn_metadata.arg_model = strict
    tool.parameters = lean_schema(strict.model_json_schema(by_alias=True))


_FAR = 10**9


def lean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without what a model does not need to call the tool.

    Left out: titles (the property's name says it), the docstrings of nested models (written for
    this code's readers; their fields carry their own descriptions), ``null`` as an alternative and
    as a default of an optional argument (not being required says it), a minimum length of 1,
    nested models' refusal of other keys, the UUID format and bounds no one reaches; ``$defs`` of
    enums and of any-JSON values are put inline. What the arguments accept is checked by the
    argument model, never by this schema, so a call refused before is refused still.
    """
    defs: dict[str, Any] = schema.get("$defs", {})
    inline = {f"#/$defs/{name}": body for name, body in defs.items() if body == {} or "enum" in body}

    def lean(node: Any, *, in_defs: bool = False) -> Any:
        if isinstance(node, list):
            return [lean(item) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if ref in inline:
            node = {
                **{k: v for k, v in inline[ref].items() if k != "title"},
                **{k: v for k, v in node.items() if k != "$ref"},
            }
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("properties", "$defs"):
                out[key] = {
                    name: lean(body, in_defs=key == "$defs")
                    for name, body in value.items()
                    if not (key == "$defs" and f"#/$defs/{name}" in inline)
                }
            elif key == "title" or (key == "description" and in_defs):
                continue
            elif (key == "minLength" and value == 1) or (key == "additionalProperties" and value is False and in_defs):
                continue  # not sending empty text, nor keys a model is not told of, goes without saying
            elif (key == "format" and value == "uuid") or (key == "maximum" and value > _FAR):
                continue  # the description says UUID; no one reaches a bound this far
            elif key == "anyOf" and {"type": "null"} in value:
                rest = [option for option in value if option != {"type": "null"}]
                if len(rest) == 1:
                    out.update(lean(rest[0]))
                else:
                    out[key] = lean(rest)
            elif key == "additionalProperties" and lean(value) == {}:
                continue  # any JSON value: what an object allows anyway
            else:
                out[key] = lean(value)
        if out.get("default", 0) is None:
            del out["default"]
        return out

    result: dict[str, Any] = lean(schema)
    if not result.get("$defs"):
        result.pop("$defs", None)
    return result


def duration(span: timedelta) -> str:
    """A time span as a model reads it: '1 hour', '90 days', '90 seconds'."""
    seconds = int(span.total_seconds())
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} seconds"
