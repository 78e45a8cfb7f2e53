"""The probes of docs/reliability.md section 7: concurrent callers on Postgres, oversized and mistyped
tool arguments, and the modes of the embedded files.

Prints one line per probe. Its baseline is the code before a change: run it from outside the
repository against an export of that code, then against the current code, and compare.

    git archive <before> cluster | tar -x -C /tmp/before
    (cd /tmp && PYTHONPATH=/tmp/before RAY_AUTH_MODE=disabled <repo>/.venv/bin/python <repo>/bench/input_probe.py)
    (cd /tmp && RAY_AUTH_MODE=disabled <repo>/.venv/bin/python <repo>/bench/input_probe.py)

Needs Postgres at ``--postgres`` (a database is made and dropped).
"""

from __future__ import annotations

import argparse
import functools
import json
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from sqlalchemy import create_engine, make_url, text

import cluster
from actors.engine.model.trajectories import NodeIn, TrajectoryHeader
from cluster.auth import OwnerResolver
from cluster.embedding import CachedEmbedder, OnnxMiniLMEmbedder
from cluster.memory.index import MilvusMemoryIndex
from cluster.memory.models import MemoryUpdate, MemoryWrite
from cluster.memory.service import MemoryService
from cluster.services import build_services
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from cluster.storage.milvus import open_milvus
from cluster.tools import build_server
from cluster.trajectories.capture import CaptureService, RecordCall

NODE: dict[str, Any] = {
    "context_snapshot": {"goal": "g"},
    "available_actions": ["a", "b"],
    "chosen_action": "a",
    "execution_result": {"status": "success"},
}


def at_once(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    barrier = threading.Barrier(len(calls))
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = calls[i]()
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def concurrency(url: str, rounds: int, runs: int) -> None:
    db = Database(url)
    directory = Path(tempfile.mkdtemp())
    client = open_milvus(str(directory / "m.db"))
    embedder = CachedEmbedder(OnnxMiniLMEmbedder(threads=1), maxsize=4096)
    index = MilvusMemoryIndex(client, dimension=embedder.dimension, collection="probe")
    index.ensure()
    memory = MemoryService(db, embedder, index)
    current = memory.apply_write("alice", MemoryWrite(key="city", value="Lisbon"))
    acked = 0
    for r in range(rounds):
        values = [f"city {r}-{i}" for i in range(8)]
        memory.writes.embed(values, [{}] * 8)  # so the updates reach their transactions together
        target = current.memory_id
        outs = at_once(
            [functools.partial(memory.apply_update, "alice", MemoryUpdate(memory_id=target, value=v)) for v in values]
        )
        oks = [o for o in outs if not isinstance(o, Exception)]
        acked += len(oks)
        current = max(oks, key=lambda o: o.version)
    print(f"lost updates: {acked} of {rounds * 8} concurrent updates acknowledged ({rounds} rounds of 8; one a round)")
    capture = CaptureService(db)
    failed = 0
    for _ in range(runs):
        header = TrajectoryHeader(agent_id="a", task="t")
        call = RecordCall("o", header.trajectory_id, [NodeIn.model_validate(NODE)], header)
        outs = at_once([functools.partial(capture.record_batch, [call])] * 2)
        failed += any(isinstance(o, Exception) or isinstance(o[0], Exception) for o in outs)
    print(f"first-node race: {failed} of {runs} runs (the same first node twice at once) failed")
    client.close()
    db.dispose()


async def tool_calls() -> None:
    services = build_services(Settings(data_dir=Path(tempfile.mkdtemp()) / "data"))
    async with Client(build_server(services, OwnerResolver({}, "local"))) as client:
        for n in (40_000, 120_000):
            node = {**NODE, **{f"unknown_key_{i:06d}": i for i in range(n)}}
            args = {"trajectory_id": str(uuid.uuid4()), "task": "t", "agent_id": "a", "node": node}
            start = time.perf_counter()
            result = await client.call_tool("record_trajectory_node", args)
            took = time.perf_counter() - start
            answer = len(result.content[0].text.encode())  # type: ignore[union-attr]
            print(
                f"amplification: {n} unknown keys, request {len(json.dumps(args)) / 1e6:.2f} MB -> "
                f"answer {answer / 1e6:.4f} MB in {took:.1f} s"
            )
        first = {"trajectory_id": str(uuid.uuid4()), "task": "t", "agent_id": "a"}
        for tool, args in [
            ("record_trajectory_node", {**first, "node": {**NODE, "action_params": {"p": "x" * 1_000_000}}}),
            ("query_experience", {"context": "x" * 1_600_000}),
            ("query_experience", {"context": "c", "role": "r" * 1_000_000}),
            ("memory_query", {"query": "q", "top_k": True}),
            ("memory_query", {"query": "q", "as_of": 1_700_000_000}),
        ]:
            result = await client.call_tool(tool, args)
            said = result.content[0].text[:140]  # type: ignore[union-attr]
            print(f"field: {tool} {list(args)[-1]}: {'refused' if result.is_error else 'accepted'}: {said!r}")
    services.close()
    data = Path(services.db.url.removeprefix("sqlite:///")).parent
    modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in sorted(data.iterdir())}
    print(f"modes: {data.name} {oct(stat.S_IMODE(data.stat().st_mode))}, {modes}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=14)
    args = parser.parse_args()
    print(f"code: {Path(cluster.__file__).parent}")
    admin_url = make_url(args.postgres)
    name = f"probe_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        url = admin_url.set(database=name).render_as_string(hide_password=False)
        upgrade(url)
        concurrency(url, args.rounds, args.runs)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    anyio.run(tool_calls)


if __name__ == "__main__":
    main()
