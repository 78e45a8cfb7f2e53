"""Which trajectory a tool call belongs to, and the node it becomes.

A trajectory is one MCP session by default (the proxy process on stdio; the ``Mcp-Session-Id`` on
Streamable HTTP), or what the agent marks off with ``hindsight_begin`` / ``hindsight_finalize``.
It closes with the agent's outcome, or with its last call's when the agent never says (the proxy
stops, or the session is idle for ``idle_finalize_s``).

Everything here is synchronous: on the proxy's one event loop no two calls interleave inside it.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp_types import CallToolResult

from actors.engine.model.trajectories import ResultStatus, now_ms
from cluster.core.types import canonical_json
from cluster.proxy.config import RecordingSpec
from cluster.proxy.recorder import REPORT_CHUNK, FinalizeRecord, Header, NodeRecord, Recorder, ReportRecord
from cluster.proxy.redact import redact

logger = logging.getLogger(__name__)

META_CONTEXT = "hindsight/context"
"""``_meta`` key: a JSON object, what the agent sees now; stored as the node's context snapshot."""
META_TASK = "hindsight/task"
"""``_meta`` key: the task in words, for a trajectory this call opens."""
META_SESSION = "hindsight/session"
"""``_meta`` key: calls with the same value form one trajectory (clients without MCP sessions)."""

MAX_NODES = 500
"""The service's max_trajectory_nodes default: a longer session continues in a new trajectory."""
_SUMMARY_CHARS = 200
_MAX_ACTIONS = 200
_COST_BYTES = 512


@dataclass
class OpenTrajectory:
    trajectory_id: uuid.UUID
    header: Header
    parent: uuid.UUID | None = None
    """The node the next call hangs under: the last call, unless it failed (see ``_record``)."""
    last_status: ResultStatus | None = None
    nodes: int = 0
    recent: deque[dict[str, Any]] = field(default_factory=deque)
    served: list[str] = field(default_factory=list)
    advice: dict[str, str] = field(default_factory=dict)
    """Tool -> the served experience recommending it, for the decision at hand (see :meth:`Trajectories.advised`)."""
    followed: dict[str, bool] = field(default_factory=dict)
    """Served experiences the agent followed -> whether every call it made on their advice worked."""
    touched: float = field(default_factory=time.monotonic)


class Trajectories:
    """The open trajectory of each session key, turning calls into queued records."""

    def __init__(self, spec: RecordingSpec, recorder: Recorder) -> None:
        self.spec = spec
        self.recorder = recorder
        self._redact = re.compile(spec.redact)
        self._open: dict[str, OpenTrajectory] = {}

    def current(self, key: str, task: str | None = None) -> OpenTrajectory:
        """The session's open trajectory, opened now (with ``task`` or the configured one) if none is."""
        trajectory = self._open.get(key)
        if trajectory is None:
            trajectory = self._start(key, task or self.spec.task, self.spec.task_type)
        trajectory.touched = time.monotonic()
        return trajectory

    def begin(self, key: str, task: str, task_type: str | None) -> OpenTrajectory:
        """Close the session's trajectory (if it recorded anything) and open one for ``task``."""
        self.finalize(key)
        return self._start(key, task, task_type or self.spec.task_type)

    def finalize(
        self, key: str, outcome: ResultStatus | None = None, summary: str | None = None
    ) -> OpenTrajectory | None:
        """Close the session's trajectory: the outcome given, else its last call's. One that recorded
        no call was never opened in hindsight and just goes away. Returns the one closed."""
        trajectory = self._open.pop(key, None)
        if trajectory is None or trajectory.nodes == 0:
            return None
        status = outcome or trajectory.last_status or ResultStatus.SUCCESS
        self.recorder.submit(
            FinalizeRecord(trajectory.trajectory_id, status.value, summary, tuple(dict.fromkeys(trajectory.served)))
        )
        # As an agent reports what it followed: right if every call on its advice worked and the task did.
        for succeeded in (True, False):
            ids = sorted(
                t
                for t, worked in trajectory.followed.items()
                if (worked and status is ResultStatus.SUCCESS) is succeeded
            )
            for start in range(0, len(ids), REPORT_CHUNK):
                chunk = tuple(ids[start : start + REPORT_CHUNK])
                self.recorder.submit(ReportRecord(trajectory.trajectory_id, chunk, succeeded))
        return trajectory

    def advised(self, key: str, experiences: Sequence[Mapping[str, Any]], *, decision: bool) -> None:
        """Experiences served to the session (``id``, ``recommended.tool``, ``applicable`` as
        ``query_experience`` answers): reported with the trajectory's outcome when it closes. With
        ``decision`` they are advice for the decision at hand: until a call of it succeeds, a call of
        a tool one of them recommends (and holds here) follows that one, reported with its outcome."""
        trajectory = self.current(key)
        trajectory.served.extend(str(e["id"]) for e in experiences)
        if not decision:
            return
        trajectory.advice = {}
        for experience in experiences:
            recommended = experience.get("recommended")
            tool = recommended.get("tool") if isinstance(recommended, Mapping) else None
            if isinstance(tool, str) and experience.get("applicable") is not False:
                trajectory.advice.setdefault(tool, str(experience["id"]))

    def finalize_idle(self, now: float | None = None) -> int:
        now = time.monotonic() if now is None else now
        idle = [k for k, t in self._open.items() if now - t.touched >= self.spec.idle_finalize_s]
        for key in idle:
            self.finalize(key)
        return len(idle)

    def finalize_all(self) -> None:
        for key in list(self._open):
            self.finalize(key)

    def record(
        self,
        key: str,
        tools: Sequence[str],
        name: str,
        arguments: Mapping[str, Any] | None,
        result: CallToolResult | Mapping[str, Any],
        latency_ms: float,
        meta: Mapping[str, Any],
    ) -> None:
        """Queue the node for one forwarded call; ``result`` is the model or its JSON as relayed.
        Never raises: a record is not worth a failed call."""
        try:
            self._record(key, tools, name, arguments, result, latency_ms, meta)
        except Exception:
            logger.exception("recording: could not make a node for a call of %s", name)

    def _record(
        self,
        key: str,
        tools: Sequence[str],
        name: str,
        arguments: Mapping[str, Any] | None,
        result: CallToolResult | Mapping[str, Any],
        latency_ms: float,
        meta: Mapping[str, Any],
    ) -> None:
        task = meta.get(META_TASK)
        trajectory = self.current(key, task if isinstance(task, str) and task.strip() else None)
        if trajectory.nodes >= MAX_NODES:
            header = trajectory.header
            trajectory = self.begin(key, header.task, header.task_type)
        if isinstance(result, CallToolResult):
            result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        status = ResultStatus.FAILURE if result.get("isError") is True else ResultStatus.SUCCESS
        summary = _summary(result)
        # Cut to the service's limit: a node with larger arguments would be refused, and lost.
        params = _capped(redact(dict(arguments or {}), self._redact), self.spec.max_node_field_bytes)
        node_id = uuid.uuid4()
        # A plain dict, not a NodeIn: hindsight checks every node it receives, and what it refuses
        # is logged and skipped (recorder.py); checking here too would double the CPU per call.
        node = {
            "node_id": str(node_id),
            "parent_id": None if trajectory.parent is None else str(trajectory.parent),
            "timestamp": now_ms(),
            "context_snapshot": self._snapshot(trajectory, meta),
            "available_actions": _actions(tools, name),
            "chosen_action": name,
            "action_params": params,
            "execution_result": {"status": status.value, "summary": summary, **_cost(result, latency_ms)},
        }
        self.recorder.submit(NodeRecord(trajectory.trajectory_id, trajectory.header, node))
        followed = trajectory.advice.get(name)
        if followed is not None:
            trajectory.followed[followed] = trajectory.followed.get(followed, True) and status is ResultStatus.SUCCESS
        if status is ResultStatus.SUCCESS:
            trajectory.advice = {}  # the decision is made: its advice is spent
        # The learner's convention (docs/jobs.md): a failed call is a leaf and the call after it, a
        # retry or another choice, hangs beside it under the same parent; a failed first call stays
        # the root and the next one hangs under it.
        if status is ResultStatus.SUCCESS or trajectory.parent is None:
            trajectory.parent = node_id
        trajectory.last_status = status
        trajectory.nodes += 1
        trajectory.recent.append({"tool": name, "status": status.value, "result": summary[:80]})
        while len(trajectory.recent) > self.spec.recent_calls:
            trajectory.recent.popleft()

    def snapshot(self, key: str, meta: Mapping[str, Any]) -> dict[str, Any]:
        """What the next call's node would hold as context (advice asks with it)."""
        return self._snapshot(self.current(key), meta)

    def _snapshot(self, trajectory: OpenTrajectory, meta: Mapping[str, Any]) -> dict[str, Any]:
        """The agent's ``_meta`` context, else the task and the recent calls; cut to max_context_bytes."""
        given = meta.get(META_CONTEXT)
        if isinstance(given, dict):
            return _capped(dict(given), self.spec.max_context_bytes)
        snapshot: dict[str, Any] = {"task": trajectory.header.task[:500], "recent": list(trajectory.recent)}
        while len(canonical_json(snapshot).encode()) > self.spec.max_context_bytes and snapshot["recent"]:
            snapshot["recent"] = snapshot["recent"][1:]
        return _capped(snapshot, self.spec.max_context_bytes)

    def _start(self, key: str, task: str, task_type: str | None) -> OpenTrajectory:
        header = Header(task=task[:4000], agent_id=self.spec.agent_id, role=self.spec.role, task_type=task_type)
        trajectory = OpenTrajectory(uuid.uuid4(), header)
        self._open[key] = trajectory
        return trajectory


def _actions(tools: Sequence[str], chosen: str) -> list[str]:
    """The tools listed, the chosen one always among them (a call of a tool not listed is still a choice)."""
    actions = list(dict.fromkeys(tools))
    if chosen not in actions:
        actions.insert(0, chosen)
    if len(actions) > _MAX_ACTIONS:
        actions = [chosen, *[a for a in actions if a != chosen][: _MAX_ACTIONS - 1]]
    return actions


def _cost(result: Mapping[str, Any], latency_ms: float) -> dict[str, Any]:
    """What the call cost: the tool's own account when its structured result has a ``cost`` object
    (``steps``, ``latency_ms``, ``tokens``, as the learner reads them), else the latency measured."""
    structured = result.get("structuredContent")
    cost = structured.get("cost") if isinstance(structured, dict) else None
    if isinstance(cost, dict) and cost:
        return {"cost": _capped(dict(cost), _COST_BYTES)}
    return {"latency_ms": round(latency_ms, 2)}


def _summary(result: Mapping[str, Any]) -> str:
    content = result.get("content")
    texts = (
        [c.get("text") for c in content if isinstance(c, dict) and c.get("type") == "text"]
        if isinstance(content, list)
        else []
    )
    text = " ".join(t for t in texts if isinstance(t, str)).strip()
    text = " ".join(text.split())
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 3] + "..."


def _capped(snapshot: dict[str, Any], limit: int) -> dict[str, Any]:
    """Keys in order while they fit; what is left out is named under ``_cut``."""
    if len(canonical_json(snapshot).encode()) <= limit:
        return snapshot
    kept: dict[str, Any] = {}
    cut: list[str] = []
    for k, v in snapshot.items():
        trial = {**kept, k: v, "_cut": [*cut, "..."]}
        if len(canonical_json(trial).encode()) <= limit:
            kept[k] = v
        else:
            cut.append(str(k)[:40])
    result = {**kept, "_cut": cut}
    while len(canonical_json(result).encode()) > limit and result["_cut"]:
        result["_cut"] = result["_cut"][:-1]
    return result
