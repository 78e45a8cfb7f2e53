"""A multi-role family: a planner plans a sync, an executor runs it, a verifier checks it.

Each role keeps its own trajectory (and its own experience library). Hidden rules are listed in
:mod:`cluster.demo.envs`.
"""

from __future__ import annotations

from types import MappingProxyType

from pydantic import JsonValue

from cluster.demo.env_base import (
    Call,
    Episode,
    StepResult,
    StepView,
    fail,
    log_uniform,
    make_view,
    mismatch,
    ok,
    token,
    tool_call,
)

INCREMENTAL_LIMIT = 5000
SAMPLE_SIZE = 200
REPLICA_LAG_LIMIT = 60
SYNC_ROLES = MappingProxyType({"request": "planner", "plan": "planner", "claim": "executor", "execute": "executor"})


class DataSync(Episode):
    """Sync a source table to a warehouse: a planner plans, an executor runs, a verifier checks."""

    family = "data_sync"
    task_type = "sync"
    first_stage = "request"
    decoys = MappingProxyType(
        {
            "plan": (
                ("plan_manual_export", "manual exports of CRM data are not allowed"),
                ("plan_streaming", "no change-data-capture stream is configured for the CRM"),
            ),
            "execute": (
                ("run_tomorrow", "the sync must finish today"),
                ("run_via_cron", "cron jobs start at 02:00; the sync must finish today"),
            ),
            "verify": (
                ("verify_checksum", "checksums differ: the warehouse stores decimals differently"),
                ("verify_by_eye", "a manual spot check is not an accepted verification"),
            ),
        }
    )
    default_budget = 16

    def __init__(self, seed: int, budget: int | None = None) -> None:
        super().__init__(seed, budget)
        self.row_count = log_uniform(self.rng, 50, 50_000)
        self.live_writes = self.row_count <= INCREMENTAL_LIMIT and self.rng.random() < 0.4
        self.target_dedups = self.row_count >= SAMPLE_SIZE and self.rng.random() < 0.4
        self.peak_hours = self.rng.random() < 0.4
        self.replica_lag_s = self.rng.randint(0, 50) if self.peak_hours else self.rng.choice([5, 20, 90, 300])
        self.job = f"sync-{token(self.rng, 8)}"
        self.plan = "bulk"

    @property
    def task(self) -> str:
        return f"Sync {self.row_count} CRM rows to the warehouse (job {self.job})"

    def _view(self, stage: str) -> StepView:
        role = SYNC_ROLES.get(stage, "verifier")
        job = tool_call(
            {"request": "read_request", "claim": "claim_job", "report": "load_report"}.get(stage, "-"), job_id=self.job
        )
        if stage in ("request", "claim", "report"):
            return make_view(stage, {"goal": job.action.replace("_", " "), "jobs": [self.job]}, job, role=role)
        context: dict[str, JsonValue]
        if stage == "plan":
            context = {"goal": "choose how to sync", "row_count": self.row_count, "live_writes": self.live_writes}
            return make_view(
                stage, context, tool_call("plan_bulk"), tool_call("plan_incremental", batch_rows=500), role=role
            )
        if stage == "execute":
            context = {
                "goal": "run the plan",
                "plan": self.plan,
                "peak_hours": self.peak_hours,
                "replica_lag_s": self.replica_lag_s,
                "jobs": [self.job],
            }
            runs = (tool_call("run_in_place", job_id=self.job), tool_call("run_on_replica", job_id=self.job))
            return make_view(stage, context, *runs, role=role)
        context = {"goal": "verify the synced data", "row_count": self.row_count, "target_dedups": self.target_dedups}
        return make_view(
            stage, context, tool_call("verify_count"), tool_call("verify_sample", size=SAMPLE_SIZE), role=role
        )

    def _judge(self, stage: str, call: Call) -> StepResult:
        if "job_id" in self._view(stage).options[0].params:
            missing = mismatch(call, "job_id", self.job, "job")
            if missing is not None:
                return missing
        if call.action == "plan_bulk" and self.live_writes:
            return fail("the source is being written to; a bulk snapshot would be inconsistent")
        if call.action == "plan_incremental" and self.row_count > INCREMENTAL_LIMIT:
            return fail("estimated run time exceeds the 60 min window")
        if call.action == "run_in_place" and self.peak_hours:
            return fail("rejected by the DBA guard: no heavy reads on the primary during peak hours")
        if call.action == "run_on_replica" and self.replica_lag_s > REPLICA_LAG_LIMIT:
            return fail(f"the replica is {self.replica_lag_s} s behind; the sync would be stale")
        if call.action == "verify_count" and self.target_dedups:
            return fail("count mismatch: the target deduplicates rows")
        if call.action == "verify_sample" and self.row_count < SAMPLE_SIZE:
            return fail(f"a sample needs at least {SAMPLE_SIZE} rows")
        return ok(f"{stage} done")

    def _next(self, stage: str, call: Call) -> str | None:
        if stage == "plan":
            self.plan = call.action.removeprefix("plan_")
        order = ["request", "plan", "claim", "execute", "report", "verify"]
        index = order.index(stage) + 1
        return order[index] if index < len(order) else None

    def oracle_steps(self) -> float:
        # One call per stage: the instance is drawn so that one plan, run and check always fits.
        return 6.0
