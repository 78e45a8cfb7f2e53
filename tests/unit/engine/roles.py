"""A planner → executor → verifier run for the cross-role tests: the planner chooses how to sync,
the executor runs it, the verifier checks it. A bulk plan on a table with live writes passes the
planner and the executor and fails verification."""

from __future__ import annotations

from datetime import timedelta

from actors.engine.model.trajectories import Trajectory
from tests.unit.engine.builders import T0, Builder

TASK_TYPE = "sync"


def member(builder: Builder, run_id: str | None, position: int, outcome: str, *, start: int = 0) -> Trajectory:
    trajectory = builder.build(outcome)
    return trajectory.model_copy(
        update={
            "header": trajectory.header.model_copy(update={"run_id": run_id}),
            "created_at": T0 + timedelta(minutes=start * 10 + position),
            "finalized_at": T0 + timedelta(minutes=start * 10 + position, seconds=30),
        }
    )


def planner(plan: str, rows: int, live_writes: bool, run_id: str | None, start: int = 0) -> Trajectory:
    b = Builder(role="planner", task_type=TASK_TYPE, task="Sync CRM rows to the warehouse")
    root = b.add("read_request", context={"goal": "read the request"})
    context = {"goal": "choose how to sync", "row_count": rows, "live_writes": live_writes}
    b.add(plan, ["plan_bulk", "plan_incremental"], parent=root, context=context)
    return member(b, run_id, 0, "success", start=start)


def executor(plan: str, run_id: str | None, start: int = 0, *, own_mistake: bool = False) -> Trajectory:
    b = Builder(role="executor", task_type=TASK_TYPE, task="Run the sync plan")
    root = b.add("claim_job", context={"goal": "claim the job"})
    context = {"goal": "run the plan", "plan": plan.removeprefix("plan_")}
    actions = ["run_in_place", "run_on_replica"]
    if not own_mistake:
        b.add("run_on_replica", actions, parent=root, context=context)
        return member(b, run_id, 1, "success", start=start)
    # Its own choice failed where the other one, tried next, worked; then it gave up.
    b.add("run_in_place", actions, parent=root, context=context, status="failure", summary="rejected by the DBA guard")
    retry = b.add("run_on_replica", actions, parent=root, context=context)
    b.add("report", parent=retry, status="failure", summary="the job was cancelled")
    return member(b, run_id, 1, "failure", start=start)


def verifier(consistent: bool, rows: int, run_id: str | None, start: int = 0) -> Trajectory:
    b = Builder(role="verifier", task_type=TASK_TYPE, task="Verify the synced data")
    root = b.add("load_report", context={"goal": "load the report"})
    context = {"goal": "verify the synced data", "row_count": rows}
    actions = ["verify_count", "verify_sample"]
    if consistent:
        b.add("verify_count", actions, parent=root, context=context)
        return member(b, run_id, 2, "success", start=start)
    # Every check it tried failed: the data it was handed is wrong, not its way of checking.
    for check in actions:
        b.add(check, actions, parent=root, context=context, status="failure", summary="rows differ from the source")
    return member(b, run_id, 2, "failure", start=start)


def sync_run(plan: str, rows: int, live_writes: bool, run_id: str | None, start: int = 0) -> list[Trajectory]:
    """One run; it fails verification exactly when a bulk plan met live writes."""
    consistent = not (plan == "plan_bulk" and live_writes)
    return [
        planner(plan, rows, live_writes, run_id, start),
        executor(plan, run_id, start),
        verifier(consistent, rows, run_id, start),
    ]


def sync_runs(with_run_ids: bool = True) -> list[Trajectory]:
    """Seven runs: three bulk plans on live tables fail verification, the others pass."""
    cases = [
        ("plan_bulk", 1200, True),
        ("plan_bulk", 800, True),
        ("plan_bulk", 3000, True),
        ("plan_incremental", 900, True),
        ("plan_incremental", 2500, True),
        ("plan_bulk", 1500, False),
        ("plan_bulk", 700, False),
    ]
    out: list[Trajectory] = []
    for i, (plan, rows, live) in enumerate(cases):
        out += sync_run(plan, rows, live, f"run-{i}" if with_run_ids else None, start=i)
    return out
