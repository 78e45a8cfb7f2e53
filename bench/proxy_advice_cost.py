"""What serving experience through the proxy costs an agent in tokens: the ``hindsight_advice`` tool
against the experience block appended to the tool descriptions.

A library is learned for real from proxied calls: the reference ``@modelcontextprotocol/server-filesystem``
(installed by ``make test``) behind ``hindsight proxy`` in process, SQLite + Milvus Lite in a temporary
directory, ``--runs`` tasks that guess a file name and fail and as many that list the folder first and
succeed; then one analysis pass. Every LLM turn pays for the tool list; the two ways pay differently:

* **tool** — the ``hindsight_advice`` definition is in the list on every turn; its answer (the
  experience block) is paid once per call, only when the agent asks;
* **descriptions** — the block rides in the tool descriptions on every turn, asked for or not.

Tokens are counted with the embedder's tokenizer (MiniLM's WordPiece); an LLM's tokenizer differs,
the ratio between rows does not much.

Usage: ``python -m bench.proxy_advice_cost [--runs 3]``
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

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


async def _learn_and_ask(workdir: Path, runs: int) -> tuple[list[str], str]:
    """The tool definitions the agent lists (JSON) and the advice answer once a library is learned."""
    files = workdir / "files"
    files.mkdir()
    (files / "notes.txt").write_text("the notes\n")
    config = ProxyConfig.model_validate(
        {"mcpServers": {"files": {"command": str(SERVER), "args": [str(files)]}}, "hindsight": {"task": "read notes"}}
    )
    services = build_services(Settings(data_dir=workdir / "data"))
    hindsight = build_server(services, OwnerResolver({}, "local"))
    try:
        for _ in range(runs):
            async with Client(build_proxy_server(config, lambda: Client(hindsight))) as agent:
                await agent.call_tool("read_text_file", {"path": str(files / "note.txt")})
            async with Client(build_proxy_server(config, lambda: Client(hindsight))) as agent:
                await agent.call_tool("list_directory", {"path": str(files)})
                await agent.call_tool("read_text_file", {"path": str(files / "notes.txt")})
        analysis_for(services).run_once()
        async with Client(build_proxy_server(config, lambda: Client(hindsight))) as agent:
            tools = (await agent.list_tools()).tools
            advice = await agent.call_tool("hindsight_advice", {})
    finally:
        services.close()
    listed = [t.model_dump_json(by_alias=True, exclude_none=True) for t in tools]
    answer = " ".join(c.text for c in advice.content if isinstance(c, TextContent))
    return listed, answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="Failing and succeeding tasks each, to learn from.")
    args = parser.parse_args()
    if not SERVER.exists():
        raise SystemExit(f"{SERVER} is missing: run `make tests/e2e/proxy/servers/node_modules/.installed`")
    with tempfile.TemporaryDirectory() as tmp:
        listed, answer = anyio.run(_learn_and_ask, Path(tmp), args.runs)
    tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
    tokenizer.no_truncation()
    tokenizer.no_padding()  # the file pads to 128: every short text would count as 128

    def tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    upstream = [t for t in listed if '"name":"hindsight_' not in t]
    advice_tool = next(t for t in listed if '"name":"hindsight_advice"' in t)
    control = [t for t in listed if t not in upstream and t != advice_tool]
    block = answer if answer.startswith("[EXPERIENCE]") else ""
    table = Table(title="Tokens an agent reads (MiniLM WordPiece)")
    table.add_column("what")
    table.add_column("every turn", justify="right")
    table.add_column("per advice call", justify="right")
    table.add_row("upstream tool list (for scale)", str(sum(tokens(t) for t in upstream)), "")
    table.add_row("hindsight_begin + hindsight_finalize", str(sum(tokens(t) for t in control)), "")
    table.add_row("advice as a tool: definition / answer", str(tokens(advice_tool)), str(tokens(answer)))
    table.add_row("advice in the descriptions: block", str(tokens(block)), "0")
    Console().print(table)
    print(f"advice answer: {answer}")


if __name__ == "__main__":
    main()
