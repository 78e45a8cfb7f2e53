"""Recording load that survives a crash of the service, and the audit of what the service kept.

Agents speak MCP's Streamable HTTP wire format (one JSON-RPC ``tools/call`` POST a call, as
``bench/service_load.py``'s ``WireAgent``) and write down every call the service *acknowledged*.
A call that fails for a transport reason (connection refused or reset, HTTP 5xx while the service
restarts) is sent again, unchanged, until it is acknowledged: node ids and trajectory ids are the
caller's, so a repeated call must not store anything twice. The audit then reads SQL and Milvus
directly and compares them with what the agents were told.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from sqlalchemy import func, select

from actors.engine.model.templates import EvidenceKind, ExperienceTemplate
from cluster.experience.index import MilvusExperienceIndex
from cluster.experience.tables import ConfidenceChangeRow, ExperienceTemplateRow, ServedOutcomeRow
from cluster.memory.index import MilvusMemoryIndex
from cluster.memory.policy import MemoryState
from cluster.memory.tables import MemoryIndexQueueRow, MemoryRow
from cluster.services import milvus_client
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.trajectories.tables import NodeRow, TrajectoryRow

OWNER = "local"  # no tokens: the service runs in development mode, every caller is this owner
TASK_TYPES = 3
# (rows, action, succeeded): small imports work item by item, big ones only in bulk; lessons to learn.
RUNS = (
    (10, "add_item", True),
    (150, "add_item", False),
    (100, "bulk_import", True),
    (20, "add_item", True),
    (200, "add_item", False),
    (500, "bulk_import", True),
)
TRANSIENT_TOOL_ERRORS = ("StoreUnavailable",)


class CallFailed(Exception):
    """The service refused a call for a reason a retry cannot cure; the audit reports it."""


@dataclass(frozen=True)
class Finalized:
    outcome: str
    served: tuple[uuid.UUID, ...]


@dataclass(frozen=True)
class Remembered:
    memory_id: uuid.UUID
    value: str


@dataclass
class Ledger:
    """What the service acknowledged, and what was sent without an answer."""

    nodes: dict[uuid.UUID, uuid.UUID] = field(default_factory=dict)
    """Acknowledged node id -> its trajectory."""
    sent_nodes: dict[uuid.UUID, uuid.UUID] = field(default_factory=dict)
    """Every node id sent, acknowledged or not -> its trajectory."""
    finalized: dict[uuid.UUID, Finalized] = field(default_factory=dict)
    memories: dict[str, Remembered] = field(default_factory=dict)
    """Acknowledged memory key -> the id and value the write returned."""
    calls: Counter[str] = field(default_factory=Counter)
    retried: Counter[str] = field(default_factory=Counter)
    """Calls sent more than once before their answer came."""
    errors: list[str] = field(default_factory=list)
    memory_prefix: str = "soak/"
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acknowledge(self, trajectory: uuid.UUID, nodes: list[dict[str, Any]]) -> None:
        with self.lock:
            self.nodes.update((uuid.UUID(n["node_id"]), trajectory) for n in nodes)

    def counts(self) -> tuple[int, int, int]:
        """Nodes, finalized trajectories and memories acknowledged so far."""
        with self.lock:
            return len(self.nodes), len(self.finalized), len(self.memories)

    def summary(self) -> str:
        return (
            f"{len(self.nodes)} nodes, {len(self.finalized)} finalized, {len(self.memories)} memories acknowledged; "
            f"retried {dict(self.retried)}; errors {len(self.errors)}"
        )


class WireClient:
    """One agent's connection: JSON-RPC tool calls, sent again until acknowledged (or refused)."""

    _ids = itertools.count(1)

    def __init__(
        self, http: httpx.AsyncClient, url: str, ledger: Ledger, give_up_s: float, abort: threading.Event
    ) -> None:
        self.http = http
        self.url = url
        self.ledger = ledger
        self.give_up_s = give_up_s
        self.abort = abort

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + self.give_up_s
        body = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": tool, "arguments": args}}
        wait = 0.1
        for attempt in itertools.count():
            if attempt == 1:
                self.ledger.retried[tool] += 1
            reason = await self._once(tool, {**body, "id": next(self._ids)})
            if isinstance(reason, dict):
                self.ledger.calls[tool] += 1
                return reason
            if time.monotonic() + wait > deadline:
                raise CallFailed(f"{tool}: no answer within {self.give_up_s:.0f}s, last: {reason}")
            if self.abort.is_set():
                raise CallFailed(f"{tool}: aborted, last: {reason}")
            await asyncio.sleep(wait)
            wait = min(wait * 2, 1.0)
        raise AssertionError("unreachable")

    async def _once(self, tool: str, message: dict[str, Any]) -> dict[str, Any] | str:
        """The structured answer, or why to send the call again."""
        try:
            response = await self.http.post(self.url, content=json.dumps(message))
        except httpx.TransportError as exc:
            return f"{type(exc).__name__}: {exc}"
        if response.status_code >= 500 or response.status_code in (404, 429):
            # 404: Serve's ingress listens before the restarted app is routed (it says 404, not 503).
            return f"HTTP {response.status_code}"
        if response.status_code != 200:
            raise CallFailed(f"{tool}: HTTP {response.status_code} {response.text[:300]}")
        reply = response.json()
        if "error" in reply:
            raise CallFailed(f"{tool}: {reply['error']}")
        result = reply["result"]
        if result.get("isError"):
            text = " ".join(c.get("text", "") for c in result.get("content", []))
            if text.startswith(TRANSIENT_TOOL_ERRORS):
                return text
            raise CallFailed(f"{tool}: {text[:500]}")
        answer: dict[str, Any] = result.get("structuredContent") or {}
        return answer


def _nodes(rows: int, action: str, ok: bool, rng: random.Random, run: int) -> list[dict[str, Any]]:
    """An import: open the file, look at it a few times, choose how to insert (the decision), verify."""
    path = f"/data/run-{run}/products_{rows}.csv"
    goal: dict[str, Any] = {"goal": "Import products from a CSV file"}
    decision = {**goal, "row_count": rows, "file": {"path": path, "encoding": "utf-8"}}
    params: dict[str, Any] = (
        {"file": path, "encoding": "utf-8"} if action == "bulk_import" else {"sku": f"SKU-{run}", "price": rows}
    )
    status = "success" if ok else "failure"
    steps: list[tuple[str, list[str], dict[str, Any], dict[str, Any], str]]
    steps = [("open_file", ["open_file"], {"path": path}, goal, "success")]
    steps += [("peek_rows", ["peek_rows"], {"n": 10 * k}, goal, "success") for k in range(rng.randint(0, 3))]
    steps += [(action, ["add_item", "bulk_import"], params, decision, status), ("verify", ["verify"], {}, goal, status)]
    nodes: list[dict[str, Any]] = []
    for chosen, actions, arguments, context, result in steps:
        nodes.append(
            {
                "node_id": str(uuid.uuid4()),
                "parent_id": nodes[-1]["node_id"] if nodes else None,
                "context_snapshot": context,
                "available_actions": actions,
                "chosen_action": chosen,
                "action_params": arguments,
                "execution_result": {"status": result},
            }
        )
    return nodes


async def _agent(index: int, client: WireClient, stop: threading.Event, rng: random.Random) -> None:
    """Episodes until ``stop``: record a trajectory (singly or in batches), finalize it with the
    experiences it was served, remember something. The episode under way when ``stop`` is set runs
    to its end, so every call sent is answered in the end."""
    ledger = client.ledger
    for episode in itertools.count():
        if stop.is_set():
            return
        rows, action, ok = RUNS[(index + episode) % len(RUNS)]
        task_type = f"import-{index % TASK_TYPES}"  # each task type sees every kind of run
        served: list[str] = []
        if episode >= 2:
            query = {
                "context": f"import {rows} products",
                "role": "executor",
                "task_type": task_type,
                "min_confidence": 0,
            }
            found = await client.call("query_experience", query)
            served = [e["id"] for e in found.get("experiences", [])][:2]
        trajectory = uuid.uuid4()
        nodes = _nodes(rows, action, ok, rng, episode)
        with ledger.lock:
            ledger.sent_nodes.update((uuid.UUID(n["node_id"]), trajectory) for n in nodes)
        header = {"task": f"import {rows} products", "agent_id": f"agent-{index}", "role": "executor"}
        first = {"trajectory_id": str(trajectory), "node": nodes[0], **header, "task_type": task_type}
        await client.call("record_trajectory_node", first)
        ledger.acknowledge(trajectory, nodes[:1])
        if episode % 2:
            await client.call("record_trajectory_nodes", {"trajectory_id": str(trajectory), "nodes": nodes[1:]})
            ledger.acknowledge(trajectory, nodes[1:])
        else:
            for node in nodes[1:]:
                await client.call("record_trajectory_node", {"trajectory_id": str(trajectory), "node": node})
                ledger.acknowledge(trajectory, [node])
        outcome = "success" if ok else "failure"
        finalize = {"trajectory_id": str(trajectory), "outcome": outcome, "served_template_ids": served}
        await client.call("finalize_trajectory", finalize)
        with ledger.lock:
            ledger.finalized[trajectory] = Finalized(outcome, tuple(uuid.UUID(s) for s in served))
        key = f"{ledger.memory_prefix}agent-{index}/episode-{episode}"
        value = f"Agent {index} imported {rows} rows with {action} ({outcome}); note {rng.getrandbits(64):016x}."
        written = await client.call("memory_write", {"key": key, "value": value, "entity": f"project-{index % 4}"})
        with ledger.lock:
            ledger.memories[key] = Remembered(uuid.UUID(written["memory_id"]), value)


class RecordingLoad:
    """``agents`` concurrent agents on a thread of their own, recording until :meth:`stop`."""

    def __init__(self, url: str, agents: int, *, label: str = "run", give_up_s: float = 420, seed: int = 15) -> None:
        self.url = f"{url}/mcp/"
        self.agents = agents
        self.give_up_s = give_up_s
        self.seed = seed
        self.ledger = Ledger(memory_prefix=f"soak/{label}/")
        self._stop = threading.Event()
        self._abort = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="recording load", daemon=True)

    def start(self) -> RecordingLoad:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 600) -> Ledger:
        """Let every agent finish its episode (retrying through any outage), then return the ledger."""
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"the agents did not finish within {timeout_s:.0f}s: {self.ledger.summary()}")
        return self.ledger

    def abort(self) -> None:
        """Stop at once: calls without an answer are given up (for a test that failed half way)."""
        self._abort.set()
        self.stop(60)

    async def _run(self) -> None:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": LATEST_HANDSHAKE_VERSION,
        }
        limits = httpx.Limits(max_connections=self.agents)
        async with httpx.AsyncClient(headers=headers, timeout=60, limits=limits) as http:
            await asyncio.gather(*(self._guarded(i, http) for i in range(self.agents)))

    async def _guarded(self, index: int, http: httpx.AsyncClient) -> None:
        client = WireClient(http, self.url, self.ledger, self.give_up_s, self._abort)
        try:
            await _agent(index, client, self._stop, random.Random(self.seed * 1000 + index))
        except CallFailed as exc:
            self.ledger.errors.append(f"agent {index}: {exc}")


# ----------------------------------------------------------------------------------------- audit


def database(data_dir: Path) -> Database:
    return Database(Settings(data_dir=data_dir).sql_url())


@dataclass(frozen=True)
class QueueState:
    pending: int
    claimed: int
    done: int
    memory_index_queue: int


def queue_state(db: Database) -> QueueState:
    with db.read() as session:
        by_status = dict(
            session.execute(
                select(TrajectoryRow.analysis_status, func.count()).group_by(TrajectoryRow.analysis_status)
            ).all()
        )
        queued = session.scalar(select(func.count()).select_from(MemoryIndexQueueRow)) or 0
    return QueueState(by_status.get("pending", 0), by_status.get("claimed", 0), by_status.get("done", 0), queued)


def claimed(db: Database) -> int:
    """How many trajectories a worker has claimed right now."""
    with db.read() as session:
        return session.scalar(select(func.count()).where(TrajectoryRow.analysis_status == "claimed")) or 0


class HalfAnalysed:
    """Whether the worker is half way through a served trajectory: it is marked analysed while a
    served outcome of it is not counted yet, or an outcome is counted while it is not yet marked.
    Those are two writes in two transactions; a kill between them must not lose the second."""

    def __init__(self, db: Database, ledger: Ledger) -> None:
        self.db = db
        self.ledger = ledger
        self._settled: set[uuid.UUID] = set()

    def __call__(self) -> bool:
        with self.ledger.lock:
            candidates = {t: f.served for t, f in self.ledger.finalized.items() if f.served and t not in self._settled}
        if not candidates:
            return False
        ids = list(candidates)
        with self.db.read() as session:
            done = set(
                session.scalars(
                    select(TrajectoryRow.trajectory_id).where(
                        TrajectoryRow.trajectory_id.in_(ids), TrajectoryRow.analysis_status == "done"
                    )
                )
            )
            counted = {
                (template, trajectory)
                for template, trajectory in session.execute(
                    select(ServedOutcomeRow.template_id, ServedOutcomeRow.trajectory_id).where(
                        ServedOutcomeRow.trajectory_id.in_(ids)
                    )
                )
            }
        half = False
        for trajectory, served in candidates.items():
            reported = [(template, trajectory) in counted for template in served]
            if trajectory in done and all(reported):
                self._settled.add(trajectory)
            elif trajectory in done or any(reported):
                half = True
        return half


def wait_settled(db: Database, finalized: set[uuid.UUID], timeout_s: float) -> float:
    """Wait until every one of ``finalized`` is analysed and no vector work is queued; returns the
    seconds it took (or ``timeout_s`` if it never settled: the audit then names what is missing)."""
    start = time.monotonic()
    ids = list(finalized)
    while time.monotonic() - start < timeout_s:
        with db.read() as session:
            done = session.scalar(
                select(func.count()).where(
                    TrajectoryRow.trajectory_id.in_(ids), TrajectoryRow.analysis_status == "done"
                )
            )
            queued = session.scalar(select(func.count()).select_from(MemoryIndexQueueRow))
            backlog = session.scalar(select(func.count()).where(ExperienceTemplateRow.index_pending.is_(True)))
        if done == len(ids) and not queued and not backlog:
            return time.monotonic() - start
        time.sleep(0.25)
    return timeout_s


@dataclass
class Audit:
    """What the service kept of what it acknowledged. Every list is a list of problems."""

    nodes_acked: int = 0
    nodes_lost: list[str] = field(default_factory=list)
    nodes_unexpected: list[str] = field(default_factory=list)
    node_counts_wrong: list[str] = field(default_factory=list)
    memories_acked: int = 0
    memories_lost: list[str] = field(default_factory=list)
    memory_duplicates: list[str] = field(default_factory=list)
    memory_retry_versions: int = 0
    """Writes the kill left unanswered that had committed: their retry made a second version (by design)."""
    finalized_acked: int = 0
    finalized_lost: list[str] = field(default_factory=list)
    analysed: int = 0
    not_analysed: list[str] = field(default_factory=list)
    outcome_problems: list[str] = field(default_factory=list)
    evidence_problems: list[str] = field(default_factory=list)
    vector_problems: list[str] = field(default_factory=list)
    max_lag_after_restart_s: float = 0.0
    """Longest wait of a trajectory analysed after the restart: from the later of its finalize and
    the service serving again, to its analysis."""
    analysed_after_restart: int = 0
    served_outcomes: int = 0
    """(served template, trajectory) pairs whose outcome was checked."""

    def problems(self) -> dict[str, list[str]]:
        return {
            name: value
            for name, value in vars(self).items()
            if isinstance(value, list) and value  # every list field is a list of problems
        }

    def describe(self, limit: int = 10) -> str:
        """The counts, and the first ``limit`` problems of each kind."""
        counts = {name: value for name, value in vars(self).items() if not isinstance(value, list)}
        lines = [", ".join(f"{name}={value}" for name, value in counts.items())]
        for name, items in self.problems().items():
            more = f" (and {len(items) - limit} more)" if len(items) > limit else ""
            lines.append(f"{name}: {len(items)}{more}")
            lines.extend(f"  {item}" for item in items[:limit])
        return "\n".join(lines)


def audit(data_dir: Path, ledger: Ledger, killed_at: datetime, serving_again_at: datetime) -> Audit:
    """Compare SQL and Milvus with ``ledger``: the ledger's trajectories and memory keys, and
    every vector. ``killed_at`` and ``serving_again_at`` are when the service was killed and when
    its restart served again."""
    result = Audit()
    db = database(data_dir)
    try:
        _audit_nodes(db, ledger, result)
        _audit_memories(db, ledger, result)
        _audit_analysis(db, ledger, result, killed_at, serving_again_at)
        _audit_vectors(data_dir, db, result)
    finally:
        db.dispose()
    return result


def _audit_nodes(db: Database, ledger: Ledger, result: Audit) -> None:
    result.nodes_acked = len(ledger.nodes)
    trajectories = set(ledger.sent_nodes.values())
    with db.read() as session:
        stored: dict[uuid.UUID, uuid.UUID] = {}
        for tid, nid in session.execute(
            select(NodeRow.trajectory_id, NodeRow.node_id).where(NodeRow.trajectory_id.in_(list(trajectories)))
        ):
            if nid in stored:
                result.nodes_unexpected.append(f"node {nid} stored twice")
            stored[nid] = tid
        counts = dict(
            session.execute(
                select(TrajectoryRow.trajectory_id, TrajectoryRow.node_count).where(
                    TrajectoryRow.trajectory_id.in_(list(trajectories))
                )
            ).all()
        )
    for nid, tid in ledger.nodes.items():
        if stored.get(nid) != tid:
            result.nodes_lost.append(f"node {nid} of trajectory {tid}")
    for nid, tid in stored.items():
        if ledger.sent_nodes.get(nid) != tid:
            result.nodes_unexpected.append(f"node {nid} of trajectory {tid} was never sent")
    per_trajectory = Counter(stored.values())
    for tid in trajectories:
        if tid in counts and counts[tid] != per_trajectory[tid]:
            result.node_counts_wrong.append(f"trajectory {tid}: node_count {counts[tid]}, {per_trajectory[tid]} rows")


def _audit_memories(db: Database, ledger: Ledger, result: Audit) -> None:
    result.memories_acked = len(ledger.memories)
    with db.read() as session:
        rows = session.execute(
            select(MemoryRow.key, MemoryRow.memory_id, MemoryRow.state, MemoryRow.text).where(
                MemoryRow.owner == OWNER, MemoryRow.key.startswith(ledger.memory_prefix)
            )
        ).all()
    by_key: dict[str, list[tuple[uuid.UUID, MemoryState, Any]]] = {}
    for key, memory_id, state, value in rows:
        by_key.setdefault(key, []).append((memory_id, state, value))
    for key, remembered in ledger.memories.items():
        versions = by_key.get(key, [])
        mine = [v for v in versions if v[0] == remembered.memory_id]
        if not mine:
            result.memories_lost.append(f"{key}: memory {remembered.memory_id} is not stored")
        elif mine[0][1] is not MemoryState.CURRENT:
            result.memories_lost.append(f"{key}: memory {remembered.memory_id} is {mine[0][1]}, not current")
        elif mine[0][2] != remembered.value:
            result.memories_lost.append(f"{key}: memory {remembered.memory_id} holds another value")
        result.memory_retry_versions += max(len(versions) - 1, 0)
    for key, versions in by_key.items():
        current = [v for v in versions if v[1] is MemoryState.CURRENT]
        if len(current) != 1:
            result.memory_duplicates.append(f"{key}: {len(current)} current versions")
        if key not in ledger.memories:
            result.memory_duplicates.append(f"{key}: stored but never acknowledged")


def _audit_analysis(
    db: Database, ledger: Ledger, result: Audit, killed_at: datetime, serving_again_at: datetime
) -> None:
    result.finalized_acked = len(ledger.finalized)
    ids = list(ledger.finalized)
    with db.read() as session:
        rows = {
            r.trajectory_id: (r.status, r.outcome, r.analysis_status, r.finalized_at, r.analysed_at)
            for r in session.execute(
                select(
                    TrajectoryRow.trajectory_id,
                    TrajectoryRow.status,
                    TrajectoryRow.outcome,
                    TrajectoryRow.analysis_status,
                    TrajectoryRow.finalized_at,
                    TrajectoryRow.analysed_at,
                ).where(TrajectoryRow.trajectory_id.in_(ids))
            )
        }
        outcomes = {
            (template, trajectory)
            for template, trajectory in session.execute(
                select(ServedOutcomeRow.template_id, ServedOutcomeRow.trajectory_id)
            )
        }
        changes: Counter[tuple[uuid.UUID, uuid.UUID | None]] = Counter(
            (template, trajectory)
            for template, trajectory in session.execute(
                select(ConfidenceChangeRow.template_id, ConfidenceChangeRow.trajectory_id).where(
                    ConfidenceChangeRow.reason.in_(("success", "failure")),
                    ConfidenceChangeRow.trajectory_id.is_not(None),
                )
            )
        )
        in_sql = set(
            session.scalars(
                select(TrajectoryRow.trajectory_id).where(
                    TrajectoryRow.owner == OWNER, TrajectoryRow.status == "finalized"
                )
            )
        )
        templates = [
            (owner, ExperienceTemplate.model_validate(model))
            for owner, model in session.execute(select(ExperienceTemplateRow.owner, ExperienceTemplateRow.model))
        ]
    for tid, finalized in ledger.finalized.items():
        row = rows.get(tid)
        if row is None or row[0] != "finalized" or (row[1] or {}).get("status") != finalized.outcome:
            result.finalized_lost.append(f"trajectory {tid}: {row[:2] if row else 'missing'}")
            continue
        if row[2] != "done" or row[4] is None:
            result.not_analysed.append(f"trajectory {tid}: analysis {row[2]}")
            continue
        result.analysed += 1
        finalized_at, analysed_at = row[3], row[4]
        if analysed_at >= killed_at and finalized_at is not None:
            # The workers start before the service logs that it serves: a lag may be below zero.
            result.analysed_after_restart += 1
            lag = (analysed_at - max(finalized_at, serving_again_at)).total_seconds()
            result.max_lag_after_restart_s = max(result.max_lag_after_restart_s, lag)
        for served in finalized.served:
            # One served outcome per (template, trajectory): neither lost nor counted twice.
            pair = (served, tid)
            result.served_outcomes += 1
            if pair not in outcomes or changes[pair] != 1:
                result.outcome_problems.append(
                    f"trajectory {tid}, template {served}: outcome stored {pair in outcomes}, "
                    f"counted {changes[pair]} times"
                )
    for _owner, template in templates:
        # Templates gather evidence from every run on the data directory, not just this ledger's.
        _check_evidence(template, in_sql, result)


def _check_evidence(template: ExperienceTemplate, finalized: set[uuid.UUID], result: Audit) -> None:
    """A template's support is what its provenance shows, each piece counted once."""
    name = f"template {template.template_id}"
    keys = [(p.trajectory_id, p.node_ids, p.kind) for p in template.provenance]
    if len(keys) != len(set(keys)):
        result.evidence_problems.append(f"{name}: {len(keys) - len(set(keys))} pieces of evidence repeated")
    trajectories = {p.trajectory_id for p in template.provenance}
    successes = sum(1 for p in template.provenance if p.kind is EvidenceKind.RECOMMENDED_SUCCEEDED)
    failures = sum(1 for p in template.provenance if p.kind is EvidenceKind.AVOIDED_FAILED)
    support = template.support
    if (support.trajectories, support.successes, support.failures) != (len(trajectories), successes, failures):
        result.evidence_problems.append(
            f"{name}: support {support.trajectories}/{support.successes}/{support.failures} "
            f"(trajectories/successes/failures), provenance {len(trajectories)}/{successes}/{failures}"
        )
    stray = trajectories - finalized
    if stray:
        result.evidence_problems.append(f"{name}: evidence from {len(stray)} trajectories never finalized")


def _audit_vectors(data_dir: Path, db: Database, result: Audit) -> None:
    """Milvus holds a vector for every memory version and every template in SQL, and nothing else."""
    settings = Settings(data_dir=data_dir)
    client = milvus_client(settings)
    try:
        memory_index = MilvusMemoryIndex(client, dimension=settings.embedding.dimension)
        experience_index = MilvusExperienceIndex(client, dimension=settings.embedding.dimension)
        with db.read() as session:
            seqs = set(session.scalars(select(MemoryRow.seq).where(MemoryRow.owner == OWNER)))
            queued = session.scalar(select(func.count()).select_from(MemoryIndexQueueRow)) or 0
            template_ids = set(session.scalars(select(ExperienceTemplateRow.template_id)))
            backlog = session.scalar(select(func.count()).where(ExperienceTemplateRow.index_pending.is_(True))) or 0
        indexed = memory_index.seqs(OWNER)
        indexed_templates = experience_index.ids(OWNER)
    finally:
        client.close()
    if queued:
        result.vector_problems.append(f"{queued} memory vector changes still queued")
    if backlog:
        result.vector_problems.append(f"{backlog} template versions still to index")
    missing, stray = seqs - indexed, indexed - seqs
    if missing:
        result.vector_problems.append(f"{len(missing)} memories without a vector, e.g. seq {min(missing)}")
    if stray:
        result.vector_problems.append(f"{len(stray)} vectors of no memory, e.g. seq {min(stray)}")
    if template_ids ^ indexed_templates:
        result.vector_problems.append(
            f"templates: {len(template_ids - indexed_templates)} without a vector, "
            f"{len(indexed_templates - template_ids)} vectors of no template"
        )


def utc_now() -> datetime:
    return datetime.now(UTC)
