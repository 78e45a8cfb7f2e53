"""What serving experience through the proxy costs an agent in tokens: the ``hindsight_advice`` tool
against the experience block appended to the tool descriptions.

A library is learned for real from proxied calls: the reference ``@modelcontextprotocol/server-filesystem``
(installed by ``make test``) behind ``hindsight proxy`` in process, SQLite + Milvus Lite in a temporary
directory, ``--runs`` tasks that guess a file name and fail and as many that list the folder first and
succeed; then one analysis pass. Every LLM turn pays for the tool list; the two advice modes
(``hindsight.advice``) pay differently:

* **tool** — the ``hindsight_advice`` definition is in the list on every turn; its answer (the
  experience block) is paid once per call, only when the agent asks;
* **descriptions** — each served experience's line rides in the description of the tool it
  recommends, on every turn, asked for or not. Measured against the same listing with advice off.

Tokens are counted with the embedder's tokenizer (MiniLM's WordPiece); an LLM's tokenizer differs,
the ratio between rows does not much.

Usage: ``python -m bench.proxy_advice_cost [--runs 3]``
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp_types import TextContent
from rich.console import Console
from rich.table import Table
from tokenizers import Tokenizer

from cluster.auth import OwnerResolver
from cluster.embedding.onnx_minilm import TOKENIZER_PATH
from cluster.proxy.config import ProxyConfig
from cluster.proxy.server import build_proxy_server
from cluster.services import analysis_for, build_services
from cluster.settings import Settings
from cluster.tools import build_server

SERVER = Path(__file__).resolve().parent.parent / "tests/e2e/proxy/servers/node_modules/.bin/mcp-server-filesystem"


async def _learn_and_list(workdir: Path, runs: int) -> dict[str, Any]:
    """Once a library is learned: the tools as each advice mode lists them (JSON) and the tool's answer."""
    files = workdir / "files"
    files.mkdir()
    (files / "notes.txt").write_text("the notes\n")

    def config(advice: str) -> ProxyConfig:
        return ProxyConfig.model_validate(
            {
                "mcpServers": {"files": {"command": str(SERVER), "args": [str(files)]}},
                "hindsight": {"task": "read notes", "advice": advice},
            }
        )

    services = build_services(Settings(data_dir=workdir / "data"))
    hindsight = build_server(services, OwnerResolver({}, "local"))
    try:
        for _ in range(runs):
            async with Client(build_proxy_server(config("tool"), lambda: Client(hindsight))) as agent:
                await agent.call_tool("read_text_file", {"path": str(files / "note.txt")})
            async with Client(build_proxy_server(config("tool"), lambda: Client(hindsight))) as agent:
                await agent.call_tool("list_directory", {"path": str(files)})
                await agent.call_tool("read_text_file", {"path": str(files / "notes.txt")})
        analysis_for(services).run_once()
        listed: dict[str, Any] = {}
        for advice in ("off", "tool", "descriptions"):
            async with Client(build_proxy_server(config(advice), lambda: Client(hindsight))) as agent:
                listed[advice] = [
                    t.model_dump_json(by_alias=True, exclude_none=True) for t in (await agent.list_tools()).tools
                ]
                if advice == "tool":
                    answer = await agent.call_tool("hindsight_advice", {})
                    listed["answer"] = " ".join(c.text for c in answer.content if isinstance(c, TextContent))
    finally:
        services.close()
    return listed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="Failing and succeeding tasks each, to learn from.")
    args = parser.parse_args()
    if not SERVER.exists():
        raise SystemExit(f"{SERVER} is missing: run `make tests/e2e/proxy/servers/node_modules/.installed`")
    with tempfile.TemporaryDirectory() as tmp:
        listed = anyio.run(_learn_and_list, Path(tmp), args.runs)
    tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
    tokenizer.no_truncation()
    tokenizer.no_padding()  # the file pads to 128: every short text would count as 128

    def tokens(texts: list[str]) -> int:
        return sum(len(tokenizer.encode(t, add_special_tokens=False).ids) for t in texts)

    def own(texts: list[str]) -> list[str]:
        return [t for t in texts if '"name":"hindsight_' in t]

    off, tool, descriptions, answer = listed["off"], listed["tool"], listed["descriptions"], listed["answer"]
    upstream = [t for t in off if t not in own(off)]
    table = Table(title="Tokens an agent reads (MiniLM WordPiece)")
    table.add_column("what")
    table.add_column("every turn", justify="right")
    table.add_column("per advice call", justify="right")
    table.add_row("upstream tool list (for scale)", str(tokens(upstream)), "")
    table.add_row("hindsight_begin + hindsight_finalize", str(tokens(own(off))), "")
    table.add_row("advice: tool (definition / answer)", str(tokens(tool) - tokens(off)), str(tokens([answer])))
    table.add_row("advice: descriptions (what they add)", str(tokens(descriptions) - tokens(off)), "0")
    Console().print(table)
    print(f"advice answer: {answer}")
    print("descriptions added:", *[t for t in descriptions if t not in off], sep="\n")


if __name__ == "__main__":
    main()
