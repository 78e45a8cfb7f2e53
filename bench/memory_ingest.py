"""Bulk ingest through MCP, and the first query right after it: LongMemEval turns, one owner per question.

Starts the service as deployed (``hindsight serve``, deploy/serve.yaml: HAProxy ingress, two
replicas, SQLite + Milvus Lite, the int8 MiniLM embedder) on a fresh data directory, and for each of
``--owners`` LongMemEval-S questions (the first of each type in turn) writes every turn of its
haystack through the official MCP client as the LongMemEval benchmark writes them (key
``<session>:<turn>``, the session id, date and speaker in metadata), ``--batch`` turns per
``memory_write`` call (``memories``), one call after the other. Then, right after the last
acknowledgement, the owner's first ``memory_query`` (the question, top 10, ``now`` = its date).

Reported, per owner and in all: ingest turns/s (first call to last answer), the first query's
latency (p50/p95 over owners, client side), how many of the owner's memories it reported as still
being indexed, and its R@10; once every owner's vectors are made (the queue in SQL empty), the time
that took, and one more query per owner with its latency and R@10.

Baselines in the same run: the turns of one more question (not one of the owners, so that its own
words are not stored yet; the words it shares with them are) through ``memory_write`` one memory a
call (``--concurrency`` calls in flight: the concurrent-call batching), last; and, first, the first
owner's turns in process through ``MemoryService.apply_writes`` (embedding the turns and their words
before the answer, on fresh stores) followed by its first query.

The client runs in a process of its own (as an external agent does). The data set is read from
outside the repository (bench/longmemeval).

    .venv/bin/python -m bench.memory_ingest [--owners 8] [--batch 100] [--concurrency 16] [--data PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.longmemeval.run import DEFAULT_DATA, LIMITS, TYPES, Haystack, load, memory_writes, moment
from bench.retrieval import open_memory
from cluster.client import http_client
from cluster.embedding import OnnxMiniLMEmbedder
from cluster.memory.models import MemoryQuery
from cluster.net import free_port
from cluster.runner import start_service
from cluster.serve_config import load_serve_config
from cluster.settings import MemorySettings, Settings

#: A few LongMemEval turns are longer than the default 16 KiB a value (see bench/longmemeval/run.py).
MAX_VALUE_BYTES = LIMITS.max_value_bytes


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def recall(keys: list[str], haystack: Haystack) -> float:
    gold = set(haystack.question.gold)
    return len(gold & set(keys[:10])) / len(gold)


def questions(data: Path, owners: int) -> list[Haystack]:
    """The first question of each type, then the second of each, ... until ``owners``."""
    per_type = math.ceil(owners / len(TYPES))
    by_type: dict[str, list[Haystack]] = {}
    for h in load(data, per_type):
        by_type.setdefault(h.question.kind, []).append(h)
    ordered = [by_type[k][i] for i in range(per_type) for k in TYPES if i < len(by_type.get(k, []))]
    return ordered[:owners]


def turns(haystack: Haystack) -> list[dict[str, Any]]:
    """The turns as ``memory_write`` arguments, as bench/longmemeval writes them."""
    return [
        w.model_dump(mode="json", include={"key", "value", "metadata", "source_ids"}) for w in memory_writes(haystack)
    ]


def query_args(haystack: Haystack) -> dict[str, Any]:
    question = haystack.question
    return {"query": question.question, "top_k": 10, "now": moment(question.date).isoformat()}


# ------------------------------------------------------------------------------------ the client


async def timed_query(client: Any, haystack: Haystack) -> dict[str, Any]:
    started = time.perf_counter()
    result = await client.call_tool("memory_query", query_args(haystack))
    ms = (time.perf_counter() - started) * 1000
    if result.is_error:
        raise RuntimeError(f"memory_query: {result.content}")
    found = result.structured_content or {}
    keys = [m["key"] for m in found.get("memories", [])]
    return {"ms": ms, "unindexed": found.get("unindexed", 0), "r10": recall(keys, haystack)}


async def drive(job: dict[str, Any]) -> dict[str, Any]:
    """One phase against the running service, in this (separate) process."""
    data, url = Path(job["data"]), job["url"]
    haystacks = {h.sample_id: h for h in questions(data, job["owners"] + 1)}
    out: dict[str, Any] = {}
    if job["phase"] == "batched":
        for owner, token in job["tokens"].items():
            haystack = haystacks[owner]
            items = turns(haystack)
            async with http_client(url, token, timeout=300) as client:
                await client.call_tool("memory_query", {"query": "warm up the connection"})
                started = time.perf_counter()
                for i in range(0, len(items), job["batch"]):
                    result = await client.call_tool("memory_write", {"memories": items[i : i + job["batch"]]})
                    if result.is_error:
                        raise RuntimeError(f"memory_write: {result.content}")
                seconds = time.perf_counter() - started
                first = await timed_query(client, haystack)
            out[owner] = {"turns": len(items), "seconds": seconds, "first": first}
    elif job["phase"] == "single":
        owner, token = next(iter(job["tokens"].items()))
        haystack = haystacks[owner]
        items = turns(haystack)
        async with http_client(url, token, timeout=300) as client:
            await client.call_tool("memory_query", {"query": "warm up the connection"})
            gate = asyncio.Semaphore(job["concurrency"])

            async def one(item: dict[str, Any]) -> None:
                async with gate:
                    result = await client.call_tool("memory_write", item)
                    if result.is_error:
                        raise RuntimeError(f"memory_write: {result.content}")

            started = time.perf_counter()
            await asyncio.gather(*(one(item) for item in items))
            seconds = time.perf_counter() - started
            first = await timed_query(client, haystack)
        out[owner] = {"turns": len(items), "seconds": seconds, "first": first}
    else:  # "again": one more query per owner, once everything is indexed
        for owner, token in job["tokens"].items():
            async with http_client(url, token, timeout=300) as client:
                await client.call_tool("memory_query", {"query": "warm up the connection"})
                out[owner] = {"again": await timed_query(client, haystacks[owner])}
    return out


def run_client(job: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.memory_ingest", "--drive", json.dumps(job)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def wait_indexed(database: Path, timeout_s: float = 1800) -> float:
    """Seconds until the vector queue in SQL is empty (read beside the service, never through it)."""
    started = time.perf_counter()
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        while time.perf_counter() - started < timeout_s:
            if db.execute("SELECT count(*) FROM memory_index_queue").fetchone()[0] == 0:
                return time.perf_counter() - started
            time.sleep(0.2)
    raise TimeoutError("the memories were not indexed in time")


# -------------------------------------------------------------------------------- the baseline


def in_process(haystack: Haystack) -> dict[str, Any]:
    """``MemoryService.apply_writes`` (embedding and term space before the answer), then its first query."""
    model = OnnxMiniLMEmbedder(threads=1)
    model.embed(["warm up"])
    with open_memory("ingest", embedder=model, limits=LIMITS) as memory:
        service = memory.service
        started = time.perf_counter()
        service.apply_writes(haystack.sample_id, memory_writes(haystack))
        seconds = time.perf_counter() - started
        args = query_args(haystack)
        request = MemoryQuery(query=args["query"], top_k=10, now=moment(haystack.question.date))
        started = time.perf_counter()
        found = service.run_query(haystack.sample_id, request)
        ms = (time.perf_counter() - started) * 1000
        assert service.words is not None
        service.words.wait()
    keys = [h.memory.key for h in found.hits]
    return {
        "turns": len(haystack.turns),
        "seconds": seconds,
        "first": {"ms": ms, "unindexed": 0, "r10": recall(keys, haystack)},
    }


# ------------------------------------------------------------------------------------------- main


def row(name: str, runs: list[dict[str, Any]], key: str = "first") -> str:
    rate = sum(r["turns"] for r in runs) / sum(r["seconds"] for r in runs) if "seconds" in runs[0] else None
    ms = [r[key]["ms"] for r in runs]
    waiting = statistics.mean(r[key]["unindexed"] for r in runs)
    r10 = statistics.mean(r[key]["r10"] for r in runs)
    turns_s = f"{rate:.0f}" if rate is not None else "–"
    return (
        f"| {name} | {len(runs)} | {turns_s} | {statistics.median(ms):.0f} / {percentile(ms, 0.95):.0f} | "
        f"{waiting:.0f} | {r10:.3f} |"
    )


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--drive":
        print(json.dumps(asyncio.run(drive(json.loads(sys.argv[2])))))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--owners", type=int, default=8, help="questions, one owner each")
    parser.add_argument("--batch", type=int, default=100, help="turns per memory_write call")
    parser.add_argument("--concurrency", type=int, default=16, help="one-memory calls in flight (baseline)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--config", type=Path, default=Path("deploy/serve.yaml"))
    args = parser.parse_args()
    everyone = questions(args.data, args.owners + 1)
    haystacks, extra = everyone[:-1], everyone[-1]
    config = load_serve_config(args.config)
    config = config.model_copy(update={"http": config.http.model_copy(update={"port": free_port()})})
    # One token per owner: the owner is the credential's, never an argument.
    tokens = {f"token-{i}": h.sample_id for i, h in enumerate(haystacks)}
    single_owner = extra.sample_id
    with tempfile.TemporaryDirectory(prefix="ingest-") as tmp:
        baseline = in_process(haystacks[0])
        settings = Settings(
            data_dir=Path(tmp),
            auth_tokens={**tokens, "token-single": single_owner},
            memory=MemorySettings(max_value_bytes=MAX_VALUE_BYTES),
        )
        service = start_service(settings, config, quiet=True)
        try:
            url = f"{service.url}/mcp/"
            common = {"data": str(args.data), "url": url, "owners": args.owners}
            batched = run_client(
                {**common, "phase": "batched", "batch": args.batch, "tokens": {o: t for t, o in tokens.items()}}
            )
            indexing_s = wait_indexed(Path(tmp) / "hindsight.db")
            again = run_client({**common, "phase": "again", "tokens": {o: t for t, o in tokens.items()}})
            # Last: one memory a call embeds before it answers, on the replicas' CPU.
            single = run_client(
                {**common, "phase": "single", "concurrency": args.concurrency, "tokens": {single_owner: "token-single"}}
            )
        finally:
            service.stop()
    runs = [batched[h.sample_id] for h in haystacks]
    n_turns = sum(r["turns"] for r in runs)
    writing_s = sum(r["seconds"] for r in runs)
    print(f"LongMemEval-S {args.data.name}: {len(haystacks)} questions (owners), {n_turns} turns")
    print()
    print("| owner | type | turns | ingest turns/s | first query ms | still indexing | R@10 | once indexed ms |")
    print("|---|---|---|---|---|---|---|---|")
    for h in haystacks:
        r, first, late = batched[h.sample_id], batched[h.sample_id]["first"], again[h.sample_id]["again"]
        print(
            f"| {h.sample_id} | {h.question.kind} | {r['turns']} | {r['turns'] / r['seconds']:.0f} | "
            f"{first['ms']:.0f} | {first['unindexed']} | {first['r10']:.3f} | {late['ms']:.0f} |"
        )
    print()
    print("| path | owners | ingest turns/s | first query ms p50 / p95 | still indexing (mean) | R@10 |")
    print("|---|---|---|---|---|---|")
    print(row(f"MCP memory_write, memories of {args.batch}, answered before indexing", runs))
    print(row(f"MCP memory_write, one memory a call, {args.concurrency} in flight (baseline)", [single[single_owner]]))
    print(row("in process MemoryService.apply_writes, embedded before the answer (baseline)", [baseline]))
    print(
        row(
            "MCP memory_query once every owner is indexed",
            [{"turns": 0, **again[h.sample_id]} for h in haystacks],
            "again",
        )
    )
    print()
    print(
        f"vectors of all {n_turns} turns made {indexing_s:.1f} s after the last write "
        f"({n_turns / (writing_s + indexing_s):.0f} turns/s from the first write to the last vector)"
    )


if __name__ == "__main__":
    main()
