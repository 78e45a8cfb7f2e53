"""How much an agent reads per ``query_experience`` call: bytes and tokens, lean default vs full.

The library is learned for real: the hindsight agent of the procedural benchmark trains on every
family (in process, SQLite + Milvus Lite in a temporary directory), then every decision point of
its stored trajectories is asked again as an agent would ask it — once with the situation
(context snapshot and available actions), once with words only — at the service's default top-k.

Three answers per query, all in the same run:

* **before** — the full result, its JSON repeated as the text content (what the tool answered
  before lean answers: ``pydantic_core.to_json(result, indent=2)`` as text, the same JSON again as
  structured content);
* **detail** — ``detail=true`` today: full templates as structured content, the full prompt block
  as text;
* **lean** — the default: the prompt block as text, one line per experience as structured content.

And per ``memory_query`` call, over one LoCoMo conversation of the development split written as
``bench.locomo.run`` writes it and asked its questions (categories 1-4) at top_k 5 (the default) and
10: **detail** (``detail=true``: each memory whole with why it matched, as every answer was before
lean memory answers) against **lean** (the default: key, value, day, id, version, score, stages).

Tokens are counted with the embedder's own tokenizer (MiniLM's WordPiece, no truncation); an
LLM's tokenizer differs, the ratio between rows does not much.

Usage: ``python -m bench.answer_size [--train 6 --rounds 2 --queries 200]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pydantic_core
from mcp import Client
from rich.console import Console
from rich.table import Table
from tokenizers import Tokenizer

from bench.locomo.run import DEFAULT_DATA, HEADLINE, load, memory_writes
from cluster.auth import OwnerResolver
from cluster.demo.harness import BenchConfig, in_process_clients, run_bench
from cluster.embedding.onnx_minilm import TOKENIZER_PATH
from cluster.services import Services, analysis_for, build_services
from cluster.settings import Settings
from cluster.tools import build_server
from cluster.trajectories.repository import SqlTrajectoryStore

OWNER = "bench-hindsight"


def situations(services: Services, limit: int) -> list[dict[str, Any]]:
    """Decision points of the stored trajectories, as query arguments (situation and words)."""
    with services.db.read() as session:
        store = SqlTrajectoryStore(session)
        groups = store.finalized_groups(OWNER)
        ids = [i for group in groups.values() for i in group]
        trajectories = store.load_many(OWNER, ids)
    out: list[dict[str, Any]] = []
    for trajectory in trajectories:
        header = trajectory.header
        for node in trajectory.nodes:
            if not node.is_decision:
                continue
            out.append(
                {
                    "context": header.task,
                    "role": header.role,
                    "task_type": header.task_type,
                    "context_snapshot": node.context_snapshot,
                    "available_actions": node.available_actions,
                }
            )
    step = max(1, len(out) // limit)
    return out[::step][:limit]


def measure(tokenizer: Tokenizer, text: str) -> tuple[int, int]:
    return len(text.encode()), len(tokenizer.encode(text, add_special_tokens=False).ids)


async def sizes(
    services: Services, queries: list[dict[str, Any]], questions: list[str]
) -> dict[str, dict[str, list[int]]]:
    tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
    tokenizer.no_truncation()
    rows: dict[str, dict[str, list[int]]] = {}

    def add(name: str, text: str, structured: Any, served: int) -> None:
        text_bytes, text_tokens = measure(tokenizer, text)
        row = rows.setdefault(name, {"text_bytes": [], "text_tokens": [], "structured_bytes": [], "served": []})
        row["text_bytes"].append(text_bytes)
        row["text_tokens"].append(text_tokens)
        row["structured_bytes"].append(len(json.dumps(structured, separators=(",", ":")).encode()))
        row["served"].append(served)

    async with Client(build_server(services, OwnerResolver({}, OWNER))) as client:
        for question in questions:
            for top_k in (5, 10):
                args = {"query": question, "top_k": top_k}
                detail = await client.call_tool("memory_query", {**args, "detail": True})
                lean = await client.call_tool("memory_query", args)
                served = len(lean.structured_content["memories"] if lean.structured_content else [])
                add(f"memory detail (top_k {top_k})", detail.content[0].text, detail.structured_content, served)
                add(f"memory lean (top_k {top_k})", lean.content[0].text, lean.structured_content, served)
        for situated in queries:
            for mode, args in (
                ("situation", situated),
                ("words only", {k: situated[k] for k in ("context", "role", "task_type")}),
            ):
                detail = await client.call_tool("query_experience", {**args, "detail": True})
                lean = await client.call_tool("query_experience", args)
                full: Any = detail.structured_content
                served = len(full["experiences"])
                before = pydantic_core.to_json(full, indent=2).decode()
                add(f"before ({mode})", before, full, served)
                add(f"detail ({mode})", detail.content[0].text, full, served)
                add(f"lean ({mode})", lean.content[0].text, lean.structured_content, served)
    return rows


def print_table(rows: dict[str, dict[str, list[int]]]) -> None:
    table = Table(title="answer size per call: query_experience (default top_k), memory_query")
    for column in ("answer", "calls", "served", "text bytes p50 / max", "text tokens p50 / max", "structured p50"):
        table.add_column(column, justify="left" if column == "answer" else "right")
    for name, row in rows.items():
        table.add_row(
            name,
            str(len(row["text_bytes"])),
            f"{statistics.mean(row['served']):.1f}",
            f"{statistics.median(row['text_bytes']):,.0f} / {max(row['text_bytes']):,}",
            f"{statistics.median(row['text_tokens']):,.0f} / {max(row['text_tokens']):,}",
            f"{statistics.median(row['structured_bytes']):,.0f}",
        )
    Console().print(table)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        services = build_services(Settings(data_dir=Path(tmp)))
        analysis = analysis_for(services)

        async def drain() -> None:
            while analysis.run_once().trajectories:
                pass

        try:
            config = BenchConfig(
                conditions=("hindsight",), rounds=args.rounds, train_episodes=args.train, eval_episodes=2
            )
            await run_bench(in_process_clients(services), drain, config)
            await drain()
            print(f"library: {services.experience.count(OWNER)} templates")
            conversation = load(DEFAULT_DATA)[0]
            services.memory.apply_writes(OWNER, memory_writes(conversation))
            questions = [q.question for q in conversation.questions if q.category in HEADLINE]
            rows = await sizes(services, situations(services, args.queries), questions[: args.queries])
        finally:
            services.close()
    print_table(rows)
    if args.out:
        Path(args.out).write_text(json.dumps(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, default=6, help="training episodes per family and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--queries", type=int, default=100, help="decision points asked again")
    parser.add_argument("--out", help="write the raw figures as JSON")
    anyio.run(main, parser.parse_args())
