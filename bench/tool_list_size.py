"""What the tool list costs a model: bytes of ``tools/list`` per tool, and what each part costs.

Every turn of an agent carries the tool list, so its size is paid again and again. The server is
built in process (SQLite + Milvus Lite in a temporary directory) and listed through the official
MCP client, as any client lists it; sizes are of the JSON the client receives (compact, by alias).

Per tool: the description, the input schema as published and as the SDK derives it, the output
schema the SDK would derive from the return annotation (none is published) and the whole entry.
The summary compares, in the same run, the list as published against the baseline the SDK gives
by default (its own input schemas plus every derived output schema: what was published before
``lean_schema``) and against the SDK's input schemas alone.

Tokens are counted with the embedder's own tokenizer (MiniLM's WordPiece); an LLM's tokenizer
differs, the ratio between rows does not much.

Usage: ``python -m bench.tool_list_size``
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.server.mcpserver.utilities.func_metadata import func_metadata
from rich.console import Console
from rich.table import Table
from tokenizers import Tokenizer

from cluster.auth import OwnerResolver
from cluster.embedding.onnx_minilm import TOKENIZER_PATH
from cluster.services import build_services
from cluster.settings import Settings
from cluster.tools import TOOL_FUNCTIONS, build_server

BUDGET_BYTES = 12 * 1024
"""The whole list must fit in this (issue 48)."""


def size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON, as it travels."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def derived_output_schemas() -> dict[str, dict[str, Any]]:
    """The output schema the SDK would publish for each tool from its return annotation."""
    out: dict[str, dict[str, Any]] = {}
    for fn in TOOL_FUNCTIONS:
        schema = func_metadata(fn, skip_names=["ctx"]).output_schema
        if schema is not None:
            out[fn.__name__] = schema
    return out


def sdk_input_schemas() -> dict[str, dict[str, Any]]:
    """The input schema the SDK derives for each tool from its signature, before ``lean_schema``."""
    return {
        fn.__name__: func_metadata(fn, skip_names=["ctx"]).arg_model.model_json_schema(by_alias=True)
        for fn in TOOL_FUNCTIONS
    }


async def listed(directory: Path) -> list[dict[str, Any]]:
    """``tools/list`` as the official client receives it, one JSON object per tool."""
    services = build_services(Settings(data_dir=directory))
    try:
        async with Client(build_server(services, OwnerResolver({}, "bench"))) as client:
            tools = (await client.list_tools()).tools
        return [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools]
    finally:
        services.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        tools = anyio.run(listed, Path(directory))
    tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
    tokenizer.no_truncation()
    derived = derived_output_schemas()
    sdk_inputs = sdk_input_schemas()
    console = Console(width=max(Console().width, 100))

    table = Table(title="tools/list, bytes per tool (compact JSON as received)")
    for column in ("tool", "description", "input schema", "SDK input schema", "SDK output schema", "entry"):
        table.add_column(column, justify="left" if column == "tool" else "right", no_wrap=column == "tool")
    for tool in tools:
        name = tool["name"]
        table.add_row(
            name,
            str(size(tool.get("description", ""))),
            str(size(tool["inputSchema"])),
            str(size(sdk_inputs[name])),
            str(size(derived[name])) if name in derived else "-",
            str(size(tool)),
        )
    console.print(table)

    sdk_default = [
        {
            **tool,
            "inputSchema": sdk_inputs[tool["name"]],
            **({"outputSchema": derived[tool["name"]]} if tool["name"] in derived else {}),
        }
        for tool in tools
    ]
    sdk_inputs_only = [{**tool, "inputSchema": sdk_inputs[tool["name"]]} for tool in tools]
    summary = Table(title=f"tools/list in all ({len(tools)} tools; budget {BUDGET_BYTES} bytes)")
    for column in ("list", "bytes", "tokens (MiniLM)", "within budget"):
        summary.add_column(column, justify="left" if column == "list" else "right")
    for label, body in (
        ("baseline: SDK input + output schemas", sdk_default),
        ("SDK input schemas, no output schemas", sdk_inputs_only),
        ("as published", tools),
    ):
        text = json.dumps({"tools": body}, separators=(",", ":"), ensure_ascii=False)
        tokens = len(tokenizer.encode(text).ids)
        summary.add_row(
            label, str(len(text.encode())), str(tokens), "yes" if len(text.encode()) <= BUDGET_BYTES else "no"
        )
    console.print(summary)


if __name__ == "__main__":
    main()
