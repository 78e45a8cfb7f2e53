"""Trajectory capture on real SQLite and Postgres: nodes readable at once, idempotent resends, refused
parents and limits, finalize rules, owner isolation, concurrent writers, and the analysis queue's claims
(docs/reliability.md, "Analysis claims are heartbeated leases in a worker's name")."""

from __future__ import annotations

import functools
import multiprocessing
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import event, select

from actors.engine.model.trajectories import (
    NodeIn,
    Outcome,
    RecordResult,
    TrajectoryHeader,
    TrajectoryLimits,
    TrajectoryStatus,
)
from cluster.core.errors import Conflict, LeaseLost, LimitExceeded, NotFound, TrajectoryClosed
from cluster.storage.db import Database, SqliteWriteLock
from cluster.trajectories.capture import CaptureService, RecordCall
from cluster.trajectories.repository import SqlTrajectoryStore
from cluster.trajectories.tables import TrajectoryRow
from tests.concurrent import at_once

OWNER = "team-a"


def make_node(parent: NodeIn | None = None, *, status: str = "success", **overrides: Any) -> NodeIn:
    fields: dict[str, Any] = {
        "parent_id": parent.node_id if parent else None,
        "context_snapshot": {"goal": "import products", "rows": 12},
        "available_actions": ["bulk_import", "add_item"],
        "chosen_action": "bulk_import",
        "action_params": {"file": "/tmp/p.csv"},
        "execution_result": {"status": status},
    }
    fields.update(overrides)
    return NodeIn.model_validate(fields)


@pytest.fixture
def capture(database: Database) -> CaptureService:
    return CaptureService(database, TrajectoryLimits(max_trajectory_nodes=20, max_context_bytes=256))


@pytest.fixture
def header(capture: CaptureService) -> TrajectoryHeader:
    h = TrajectoryHeader(agent_id="agent-1", role="executor", task="import 12 products", task_type="import")
    capture.open(OWNER, h)
    return h


def test_recorded_nodes_are_readable_at_once_from_another_connection(
    capture: CaptureService, header: TrajectoryHeader, database: Database
) -> None:
    root = make_node()
    child = make_node(root, chosen_action="add_item")
    capture.record(OWNER, header.trajectory_id, [root, child])

    other = Database(database.url)
    try:
        loaded = CaptureService(other).load(OWNER, header.trajectory_id)
    finally:
        other.dispose()
    assert [n.node_id for n in loaded.nodes] == [root.node_id, child.node_id]
    assert loaded.nodes[1].parent_id == root.node_id
    assert loaded.nodes[0].context_snapshot == {"goal": "import products", "rows": 12}
    assert loaded.header == header


def test_unknown_parent_is_an_error_and_nothing_of_the_batch_is_written(
    capture: CaptureService, header: TrajectoryHeader
) -> None:
    root = make_node()
    orphan = make_node(make_node())
    with pytest.raises(NotFound, match=r"parent .* is unknown"):
        capture.record(OWNER, header.trajectory_id, [root, orphan])
    assert capture.load(OWNER, header.trajectory_id).nodes == ()


def test_resending_the_same_node_is_a_no_op(capture: CaptureService, header: TrajectoryHeader) -> None:
    root = make_node()
    capture.record(OWNER, header.trajectory_id, [root])
    retry = root.model_copy(update={"timestamp": root.timestamp + 5})
    assert capture.record(OWNER, header.trajectory_id, [retry]).node_ids == [root.node_id]
    assert len(capture.load(OWNER, header.trajectory_id).nodes) == 1


def test_same_node_id_with_another_payload_is_a_conflict(capture: CaptureService, header: TrajectoryHeader) -> None:
    root = make_node()
    capture.record(OWNER, header.trajectory_id, [root])
    changed = root.model_copy(update={"chosen_action": "add_item"})
    with pytest.raises(Conflict, match="different payload"):
        capture.record(OWNER, header.trajectory_id, [changed])


def test_a_batch_of_calls_lands_together_and_a_refused_call_fails_alone(
    capture: CaptureService, header: TrajectoryHeader
) -> None:
    root = make_node()
    child = make_node(root, chosen_action="add_item")
    fresh = TrajectoryHeader(agent_id="agent-2", task="another task")
    fresh_root = make_node()
    outcomes = capture.record_batch(
        [
            RecordCall(OWNER, header.trajectory_id, [root]),
            RecordCall(OWNER, header.trajectory_id, [make_node(make_node())]),  # unknown parent
            RecordCall(OWNER, header.trajectory_id, [child]),
            RecordCall(OWNER, header.trajectory_id, [root.model_copy(update={"chosen_action": "add_item"})]),
            RecordCall(OWNER, fresh.trajectory_id, [fresh_root], fresh),
            RecordCall(OWNER, header.trajectory_id, [root]),  # a retry inside the same batch
        ]
    )
    assert [type(o).__name__ for o in outcomes] == [
        "RecordResult",
        "NotFound",
        "RecordResult",
        "Conflict",
        "RecordResult",
        "RecordResult",
    ]
    assert [n.node_id for n in capture.load(OWNER, header.trajectory_id).nodes] == [root.node_id, child.node_id]
    assert [n.node_id for n in capture.load(OWNER, fresh.trajectory_id).nodes] == [fresh_root.node_id]


def test_a_batch_whose_transaction_fails_is_written_call_by_call(
    capture: CaptureService, header: TrajectoryHeader, database: Database
) -> None:
    failures = iter([RuntimeError("the shared commit failed")])

    def fail_once(_: Any) -> None:
        failure = next(failures, None)
        if failure is not None:
            raise failure

    event.listen(database.engine, "commit", fail_once)
    try:
        root = make_node()
        other = make_node(root)
        outcomes = capture.record_batch(
            [RecordCall(OWNER, header.trajectory_id, [root]), RecordCall(OWNER, header.trajectory_id, [other])]
        )
    finally:
        event.remove(database.engine, "commit", fail_once)
    assert [o.node_ids for o in outcomes if not isinstance(o, Exception)] == [[root.node_id], [other.node_id]]
    assert len(capture.load(OWNER, header.trajectory_id).nodes) == 2


def test_node_limit_is_enforced_with_a_clear_error(capture: CaptureService, header: TrajectoryHeader) -> None:
    nodes = [make_node()]
    for _ in range(19):
        nodes.append(make_node(nodes[-1]))
    capture.record(OWNER, header.trajectory_id, nodes)
    with pytest.raises(LimitExceeded, match="over the limit of 20 \\(setting max_trajectory_nodes\\)"):
        capture.record(OWNER, header.trajectory_id, [make_node(nodes[-1])])
    assert len(capture.load(OWNER, header.trajectory_id).nodes) == 20


def test_oversized_context_is_rejected(capture: CaptureService, header: TrajectoryHeader) -> None:
    big = make_node(context_snapshot={"goal": "x" * 300})
    with pytest.raises(LimitExceeded, match="over the limit of 256"):
        capture.record(OWNER, header.trajectory_id, [big])
    assert capture.load(OWNER, header.trajectory_id).nodes == ()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("action_params", {"rows": "x" * 600}),
        ("execution_result", {"status": "success", "output": "x" * 600}),
    ],
)
def test_oversized_params_or_result_are_rejected_naming_the_field_and_setting(
    database: Database, field: str, value: dict[str, Any]
) -> None:
    capture = CaptureService(database, TrajectoryLimits(max_node_field_bytes=512))
    header = TrajectoryHeader(agent_id="a", task="big fields")
    with pytest.raises(
        LimitExceeded, match=rf"{field} is 6\d\d bytes, over the limit of 512 \(setting max_node_field_bytes"
    ):
        capture.record(OWNER, header.trajectory_id, [make_node(**{field: value})], header=header)
    # Refused whole: not even the trajectory was opened.
    with pytest.raises(NotFound):
        capture.load(OWNER, header.trajectory_id)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"chosen_action": "drop\x00table"}, "NUL bytes"),
        ({"context_snapshot": {"goal": "a\x00b"}}, "NUL bytes"),
        ({"action_params": {"file": float("nan")}}, "NaN"),
        ({"context_snapshot": "not an object"}, "context_snapshot"),
        ({"available_actions": "bulk_import"}, "available_actions"),
        ({"execution_result": {"status": "maybe"}}, "status"),
        ({"chosen_action": "delete_all"}, "not in available_actions"),
        ({"timestamp": -1}, "timestamp"),
    ],
)
def test_malformed_nodes_fail_at_parse_time_with_the_field_named(override: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {
        "available_actions": ["bulk_import", "add_item"],
        "chosen_action": "bulk_import",
        "execution_result": {"status": "success"},
    }
    fields.update(override)
    with pytest.raises(ValidationError, match=message):
        NodeIn.model_validate(fields)


def test_invalid_json_is_rejected_with_a_clear_error() -> None:
    with pytest.raises(ValidationError, match="Invalid JSON"):
        NodeIn.model_validate_json('{"available_actions": ["a", "b"], "chosen_action": "a", ')


def test_a_finalized_trajectory_rejects_new_nodes_but_accepts_retries(
    capture: CaptureService, header: TrajectoryHeader
) -> None:
    root = make_node()
    capture.record(OWNER, header.trajectory_id, [root])
    done = capture.finalize(OWNER, header.trajectory_id, Outcome(status="success"))
    assert done.status is TrajectoryStatus.FINALIZED
    with pytest.raises(TrajectoryClosed, match="finalized"):
        capture.record(OWNER, header.trajectory_id, [make_node(root)])
    assert capture.record(OWNER, header.trajectory_id, [root]).node_ids == [root.node_id]


def test_finalize_is_idempotent_and_a_different_outcome_conflicts(
    capture: CaptureService, header: TrajectoryHeader
) -> None:
    capture.finalize(OWNER, header.trajectory_id, Outcome(status="failure", summary="timeout"))
    capture.finalize(OWNER, header.trajectory_id, Outcome(status="failure", summary="timeout"))
    with pytest.raises(Conflict, match="another outcome"):
        capture.finalize(OWNER, header.trajectory_id, Outcome(status="success"))


def test_a_second_root_is_a_conflict(capture: CaptureService, header: TrajectoryHeader) -> None:
    capture.record(OWNER, header.trajectory_id, [make_node()])
    with pytest.raises(Conflict, match="already has a root"):
        capture.record(OWNER, header.trajectory_id, [make_node()])


def test_reopening_with_a_different_header_conflicts(capture: CaptureService, header: TrajectoryHeader) -> None:
    assert capture.open(OWNER, header).header == header
    with pytest.raises(Conflict, match="different header"):
        capture.open(OWNER, header.model_copy(update={"role": "planner"}))


def test_a_run_id_is_stored_with_the_header_and_part_of_its_identity(capture: CaptureService) -> None:
    header = TrajectoryHeader(agent_id="p1", role="planner", task="plan the sync", task_type="sync", run_id="run-1")
    capture.open(OWNER, header)
    assert capture.load(OWNER, header.trajectory_id).header.run_id == "run-1"
    with pytest.raises(Conflict, match="run_id='run-1'"):
        capture.open(OWNER, header.model_copy(update={"run_id": "run-2"}))


def test_another_owner_sees_nothing(capture: CaptureService, header: TrajectoryHeader) -> None:
    capture.record(OWNER, header.trajectory_id, [make_node()])
    with pytest.raises(NotFound):
        capture.load("team-b", header.trajectory_id)
    with pytest.raises(NotFound):
        capture.record("team-b", header.trajectory_id, [make_node()])
    with pytest.raises(Conflict, match="already exists"):
        capture.open("team-b", header)


def test_whole_trajectory_loads_as_a_dag_in_one_query(
    capture: CaptureService, header: TrajectoryHeader, database: Database
) -> None:
    root = make_node()
    left, right = make_node(root, status="failure"), make_node(root)
    capture.record(OWNER, header.trajectory_id, [root, left, right, make_node(right)])

    statements: list[str] = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731
    event.listen(database.engine, "before_cursor_execute", listener)
    try:
        loaded = capture.load(OWNER, header.trajectory_id)
    finally:
        event.remove(database.engine, "before_cursor_execute", listener)

    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 1
    children = loaded.children()
    assert [n.node_id for n in children[root.node_id]] == [left.node_id, right.node_id]
    assert len(list(loaded.paths())) == 2
    assert loaded.root() == loaded.nodes[0]


def test_concurrent_writers_on_one_trajectory_lose_nothing(database: Database) -> None:
    capture = CaptureService(database, TrajectoryLimits(max_trajectory_nodes=500))
    header = TrajectoryHeader(agent_id="a", task="parallel branches")
    root = make_node()
    capture.record(OWNER, header.trajectory_id, [root], header=header)
    branches = [[make_node(root)] for _ in range(8)]
    for branch in branches:
        for _ in range(9):
            branch.append(make_node(branch[-1]))
    errors: list[BaseException] = []

    def write(branch: list[NodeIn]) -> None:
        try:
            for node in branch:
                capture.record(OWNER, header.trajectory_id, [node])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(b,)) for b in branches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    loaded = capture.load(OWNER, header.trajectory_id)
    assert len(loaded.nodes) == 81
    assert sorted(n.seq for n in loaded.nodes) == list(range(81))


def test_the_same_first_call_sent_concurrently_opens_the_trajectory_once(database: Database) -> None:
    """A client retrying its first call while the first send is in flight: every send is answered as
    the one send would be (another replica's transaction opens the trajectory meanwhile)."""
    capture = CaptureService(database)
    callers = 8
    for _ in range(4):
        header = TrajectoryHeader(agent_id="a", task="retried first node")
        root = make_node()
        call = RecordCall(OWNER, header.trajectory_id, [root], header)
        # Half through the batched path the record tools take, half on their own.
        outcomes = at_once(
            [
                (lambda call=call: capture.record_batch([call])[0])
                if i % 2
                else functools.partial(capture.record, *call)
                for i in range(callers)
            ]
        )
        assert all(isinstance(o, RecordResult) for o in outcomes), outcomes
        assert {(tuple(o.node_ids), o.node_count) for o in outcomes} == {((root.node_id,), 1)}
        loaded = capture.load(OWNER, header.trajectory_id)
        assert [n.node_id for n in loaded.nodes] == [root.node_id]


def finalized(database: Database, count: int) -> list[uuid.UUID]:
    capture = CaptureService(database)
    ids = []
    for i in range(count):
        h = TrajectoryHeader(agent_id="a", task=f"task {i}")
        capture.record(OWNER, h.trajectory_id, [make_node()], header=h)
        capture.finalize(OWNER, h.trajectory_id, Outcome(status="success"))
        ids.append(h.trajectory_id)
    return ids


def claims(database: Database, ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str, str | None]]:
    """Each trajectory's analysis status and the worker that holds its claim."""
    with database.read() as session:
        rows = session.execute(
            select(TrajectoryRow.trajectory_id, TrajectoryRow.analysis_status, TrajectoryRow.analysis_claimed_by).where(
                TrajectoryRow.trajectory_id.in_(ids)
            )
        )
        return {trajectory_id: (status, worker) for trajectory_id, status, worker in rows}


def test_finalized_trajectories_queue_for_analysis_oldest_first(database: Database) -> None:
    ids = finalized(database, 3)
    with database.transaction() as session:
        store = SqlTrajectoryStore(session)
        assert store.queue_depth() == 3
        first = store.claim_pending(2, worker="host-a/0")
    assert [t for _, t in first] == ids[:2]
    with database.transaction() as session:
        store = SqlTrajectoryStore(session)
        assert [t for _, t in store.claim_pending(10, worker="host-a/0")] == ids[2:]
        assert store.claim_pending(10, worker="host-a/0") == []
        for owner, trajectory_id in first:
            store.mark_analysed(owner, [trajectory_id], worker="host-a/0")
        assert store.queue_depth() == 1


def test_a_live_claim_of_another_worker_is_not_taken(database: Database) -> None:
    ids = finalized(database, 2)
    with database.transaction() as session:
        SqlTrajectoryStore(session).claim_pending(10, worker="host-a/0", lease=timedelta(minutes=10))
    with database.transaction() as session:
        store = SqlTrajectoryStore(session)
        assert store.expire_leases() == 0
        assert store.claim_pending(10, worker="host-b/0") == []
    assert claims(database, ids) == dict.fromkeys(ids, ("claimed", "host-a/0"))


def test_a_heartbeat_keeps_a_claim_and_a_lapsed_claim_is_reclaimed(database: Database) -> None:
    ids = finalized(database, 2)
    with database.transaction() as session:
        # A lease of zero: the worker's heartbeats stopped (it died or hangs) the moment it claimed.
        SqlTrajectoryStore(session).claim_pending(10, worker="host-a/0", lease=timedelta(0))
    with database.transaction() as session:
        # Its heartbeat for the first arrives before anyone reclaims it; the second stays lapsed.
        assert SqlTrajectoryStore(session).heartbeat("host-a/0", ids[:1], timedelta(minutes=10)) == 1
    with database.transaction() as session:
        store = SqlTrajectoryStore(session)
        assert store.expire_leases() == 1
        assert [t for _, t in store.claim_pending(10, worker="host-b/0")] == ids[1:]
    with database.transaction() as session:
        # The reclaimed one is not taken back by a late heartbeat of its first worker.
        assert SqlTrajectoryStore(session).heartbeat("host-a/0", ids, timedelta(minutes=10)) == 1
    assert claims(database, ids) == {ids[0]: ("claimed", "host-a/0"), ids[1]: ("claimed", "host-b/0")}


def test_an_idle_worker_finds_the_queue_empty_by_reading_and_a_lapsed_claim_is_not(database: Database) -> None:
    def claimable() -> bool:
        with database.read() as session:
            return SqlTrajectoryStore(session).has_claimable()

    assert not claimable()
    ids = finalized(database, 2)
    assert claimable()
    with database.transaction() as session:
        SqlTrajectoryStore(session).claim_pending(1, worker="host-a/0", lease=timedelta(minutes=10))
        SqlTrajectoryStore(session).claim_pending(1, worker="host-a/0", lease=timedelta(0))
    # One claim is live, the other lapsed the moment it was taken: that one is still work.
    assert claimable()
    with database.transaction() as session:
        store = SqlTrajectoryStore(session)
        assert store.expire_leases() == 1
        assert [t for _, t in store.claim_pending(10, worker="host-b/0", lease=timedelta(minutes=10))] == ids[1:]
    assert not claimable()
    with database.transaction() as session:
        SqlTrajectoryStore(session).mark_analysed(OWNER, ids, worker=None)
    assert not claimable()


def test_only_the_worker_holding_the_claim_marks_a_trajectory_analysed(database: Database) -> None:
    ids = finalized(database, 1)
    with database.transaction() as session:
        SqlTrajectoryStore(session).claim_pending(10, worker="host-a/0", lease=timedelta(0))
    with database.transaction() as session:
        SqlTrajectoryStore(session).claim_pending(10, worker="host-b/0")
    with pytest.raises(LeaseLost, match=r"worker host-a/0 no longer holds the claim on 1 of 1 trajectories"):
        with database.transaction() as session:
            SqlTrajectoryStore(session).mark_analysed(OWNER, ids, worker="host-a/0")
    with database.transaction() as session:
        SqlTrajectoryStore(session).mark_analysed(OWNER, ids, worker="host-b/0")
    assert claims(database, ids) == {ids[0]: ("done", None)}


def test_a_restarted_worker_releases_the_claims_of_its_earlier_life_at_once(database: Database) -> None:
    ids = finalized(database, 3)
    with database.transaction() as session:
        store = SqlTrajectoryStore(session)
        store.claim_pending(2, worker="host-a/0", lease=timedelta(minutes=10))
        store.claim_pending(1, worker="host-b/0", lease=timedelta(minutes=10))
    with database.transaction() as session:
        assert SqlTrajectoryStore(session).release_claims("host-a/0") == 2
    with database.transaction() as session:
        store = SqlTrajectoryStore(session)
        assert store.queue_depth() == 3
        assert [t for _, t in store.claim_pending(10, worker="host-a/0")] == ids[:2]
    assert claims(database, ids)[ids[2]] == ("claimed", "host-b/0")


def test_trajectory_ids_are_uuids_client_or_server_made() -> None:
    assert isinstance(make_node().node_id, uuid.UUID)
    given = uuid.uuid4()
    assert make_node(node_id=str(given)).node_id == given


def _record_branch(url: str, trajectory_id: str, parent_id: str, count: int) -> None:
    """Runs in another process: appends a chain of ``count`` nodes under ``parent_id``."""
    db = Database(url)
    capture = CaptureService(db, TrajectoryLimits(max_trajectory_nodes=500))
    parent = uuid.UUID(parent_id)
    for _ in range(count):
        node = NodeIn.model_validate({**make_node().model_dump(mode="json"), "parent_id": str(parent)})
        capture.record(OWNER, uuid.UUID(trajectory_id), [node])
        parent = node.node_id
    db.dispose()


def test_writers_in_several_processes_lose_nothing(database: Database) -> None:
    capture = CaptureService(database, TrajectoryLimits(max_trajectory_nodes=500))
    header = TrajectoryHeader(agent_id="a", task="branches from several processes")
    root = make_node()
    capture.record(OWNER, header.trajectory_id, [root], header=header)
    context = multiprocessing.get_context("spawn")
    url = database.engine.url.render_as_string(hide_password=False)
    workers = [
        context.Process(target=_record_branch, args=(url, str(header.trajectory_id), str(root.node_id), 25))
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    loaded = capture.load(OWNER, header.trajectory_id)
    assert len(loaded.nodes) == 76
    assert sorted(n.seq for n in loaded.nodes) == list(range(76))


def _hold_write_lock(path: str, log: str, held: Any) -> None:
    with SqliteWriteLock(path):
        held.set()
        with open(log, "a") as out:
            out.write("first-start\n")
        time.sleep(0.3)
        with open(log, "a") as out:
            out.write("first-end\n")


def test_sqlite_write_lock_queues_writers_of_other_processes(tmp_path: Path) -> None:
    path, log = str(tmp_path / "x.db"), str(tmp_path / "order.log")
    context = multiprocessing.get_context("spawn")
    held = context.Event()
    first = context.Process(target=_hold_write_lock, args=(path, log, held))
    first.start()
    assert held.wait(60)
    with SqliteWriteLock(path):
        with open(log, "a") as out:
            out.write("second\n")
    first.join(timeout=60)
    assert Path(log).read_text().split() == ["first-start", "first-end", "second"]
