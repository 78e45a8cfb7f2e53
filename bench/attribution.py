"""Attribution engine benchmark: one large trajectory, then batch throughput.

Trajectories are random but seeded: mostly chains with backtracking branches, about two thirds
decision nodes, a handful of task types and context shapes, so signature groups fill up across a
batch the way they would with a fleet doing similar work.

Baselines measured in the same run:

* ``naive credit``: per decision node, re-walk every root-to-leaf path (``Trajectory.paths()``)
  and average the labels of the paths through it — the obvious O(nodes × paths × depth) approach
  the engine's single bottom-up pass replaces (it computes scores only, no contrasts or templates);
* ``JSON parse``: validating the same trajectories from JSON, a floor any worker pays anyway.

    .venv/bin/python bench/attribution.py [--repeat 20] [--seed 7] [--no-gc] [--cpu]

The single trajectory's times are also given as multiples of the JSON parse floor (``x parse``),
and each batch's as a multiple of the 100-trajectory batch's (``vs 100``: 10.0 at 1000 when
the cost is linear), so runs on other machines or under other load compare. ``--cpu`` times
this process's CPU instead of the wall clock: on a shared machine other processes' load then
counts only through the caches they share.

``--no-gc`` switches Python's cyclic garbage collector off while timing. ``attribute_batch``
pauses it for its own work (it makes no reference cycles; with ~50k live nodes in a
1000-trajectory batch, generation-2 collections took a quarter to two fifths of the time and
grew faster than the batch), so the flag now mostly changes the JSON floor and the naive baseline.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from actors.engine import attribute_batch, conditions, generalize, templates
from actors.engine.model.trajectories import (
    ExecutionResult,
    Node,
    Outcome,
    ResultStatus,
    Trajectory,
    TrajectoryHeader,
    TrajectoryStatus,
)

TASKS = ["product_import", "web_form", "report", "sync", "cleanup"]
ACTION_SETS = [["add_item", "bulk_import"], ["click", "press_enter"], ["fetch_prices", "fetch_stock", "fetch_all"]]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make_trajectory(rng: random.Random, size: int) -> Trajectory:
    task = rng.choice(TASKS)
    nodes: list[Node] = []
    for i in range(size):
        # Mostly extend the latest node (a chain); sometimes backtrack to an earlier one (a branch).
        parent = None if i == 0 else nodes[-1] if rng.random() < 0.8 else rng.choice(nodes)
        if rng.random() < 0.66:
            actions = rng.choice(ACTION_SETS)
        else:
            actions = [rng.choice(["open", "verify", "log"])]
        rows = rng.choice([5, 10, 20, 40, 100, 150, 300, 800])
        chosen = rng.choice(actions)
        fails = (chosen == "add_item" and rows > 60) or rng.random() < 0.1
        nodes.append(
            Node(
                node_id=uuid.UUID(int=rng.getrandbits(128)),
                parent_id=parent.node_id if parent else None,
                timestamp=1_700_000_000_000 + i,
                context_snapshot={
                    "goal": f"{task} batch",
                    "row_count": rows,
                    "file": {"path": f"/data/in-{i}.csv", "encoding": rng.choice(["utf-8", "utf-8", "latin-1"])},
                },
                available_actions=actions,
                chosen_action=chosen,
                action_params={"file": f"/data/in-{i}.csv", "batch": 500},
                execution_result=ExecutionResult(
                    status=ResultStatus.FAILURE if fails else ResultStatus.SUCCESS,
                    summary="timeout after 30s" if fails else None,
                ),
                seq=i,
            )
        )
    return Trajectory(
        header=TrajectoryHeader(
            trajectory_id=uuid.UUID(int=rng.getrandbits(128)), agent_id="bench", task=task, task_type=task
        ),
        owner="bench",
        status=TrajectoryStatus.FINALIZED,
        outcome=Outcome(status=rng.choice([ResultStatus.SUCCESS, ResultStatus.SUCCESS, ResultStatus.FAILURE])),
        created_at=T0,
        finalized_at=T0,
        nodes=tuple(nodes),
    )


def fleet_group(rng: random.Random, size: int, nodes: int = 12) -> tuple[list[Trajectory], list[Trajectory]]:
    """``size`` executor trajectories of one task type, each the middle role of a planner → executor →
    verifier run: the batch a fleet job attributes, and the run members it reads beside it."""
    group: list[Trajectory] = []
    members: list[Trajectory] = []
    for run in range(size):
        for role in ("planner", "executor", "verifier"):
            t = make_trajectory(rng, nodes)
            header = t.header.model_copy(
                update={"role": role, "task": "sync run", "task_type": "sync", "run_id": f"run-{run}"}
            )
            (group if role == "executor" else members).append(t.model_copy(update={"header": header}))
    return group, members


def uncached_value_kinds() -> Callable[[], None]:
    """Route the engine's modules to the uncached value classifier; returns the undo."""
    modules = [conditions, generalize, templates]
    cached = generalize.string_kind
    for module in modules:
        module.string_kind = cached.__wrapped__  # type: ignore[attr-defined]

    def undo() -> None:
        for module in modules:
            module.string_kind = cached  # type: ignore[attr-defined]

    return undo


def naive_credit(trajectory: Trajectory) -> dict[uuid.UUID, float]:
    value = {ResultStatus.SUCCESS: 1.0, ResultStatus.PARTIAL: 0.0, ResultStatus.FAILURE: -1.0}
    scores = {}
    for node in trajectory.nodes:
        if not node.is_decision:
            continue
        through = [p for p in trajectory.paths() if any(n.node_id == node.node_id for n in p)]
        scores[node.node_id] = sum(value[p[-1].execution_result.status] for p in through) / max(1, len(through))
    return scores


def best_of(
    fn: Callable[[], object], repeat: int, clock: Callable[[], float] = time.perf_counter
) -> tuple[float, float]:
    """(median, min) seconds of ``clock`` over ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times), min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-gc", action="store_true", help="disable the cyclic GC while timing")
    parser.add_argument(
        "--cpu", action="store_true", help="time this process's CPU, not the wall clock (a shared machine)"
    )
    args = parser.parse_args()
    clock = time.process_time if args.cpu else time.perf_counter
    if args.no_gc:
        gc.disable()
    rng = random.Random(args.seed)

    big = make_trajectory(rng, 500)
    decisions = sum(n.is_decision for n in big.nodes)
    leaves = len(big.leaves())
    big_json = big.model_dump_json()
    print(f"garbage collector: {'off' if args.no_gc else 'on'}; clock: {'process CPU' if args.cpu else 'wall'}")
    print(f"one trajectory: 500 nodes, {decisions} decisions, {leaves} leaves (median / best of {args.repeat})")
    rows = [
        ("attribute_batch([t])", lambda: attribute_batch([big])),
        ("naive credit (baseline)", lambda: naive_credit(big)),
        ("JSON parse (floor)", lambda: Trajectory.model_validate_json(big_json)),
    ]
    timed = [(name, *best_of(fn, args.repeat, clock)) for name, fn in rows]
    floor = timed[-1][1]
    # Times as multiples of the parse floor measured here: comparable across machines and loads.
    print(f"{'step':<28}{'median ms':>12}{'best ms':>10}{'x parse':>10}")
    for name, median, best in timed:
        print(f"{name:<28}{median * 1e3:>12.2f}{best * 1e3:>10.2f}{median / floor:>10.1f}")
    found = sum(len(r.templates) for r in attribute_batch([big]))
    print(f"templates found: {found}")

    print()
    print("batches of 50-node trajectories (median of 3; throughput from the median;")
    print("vs 100: time over the 100-trajectory batch's, 10.0 at 1000 when the cost is linear)")
    measured = []
    for size in (10, 100, 1000):
        batch = [make_trajectory(rng, 50) for _ in range(size)]
        payloads = [t.model_dump_json() for t in batch]
        median, _ = best_of(lambda b=batch: attribute_batch(b), 3, clock)  # type: ignore[misc]
        parse, _ = best_of(lambda p=payloads: [Trajectory.model_validate_json(x) for x in p], 3, clock)  # type: ignore[misc]
        naive, _ = best_of(lambda b=batch: [naive_credit(t) for t in b], 1, clock)  # type: ignore[misc]
        templates = sum(len(r.templates) for r in attribute_batch(batch))
        measured.append((size, median, templates, parse, naive))
    engine_100, parse_100 = next((m[1], m[3]) for m in measured if m[0] == 100)
    print(
        f"{'batch':>6}{'engine ms':>11}{'vs 100':>8}{'traj/s':>10}{'nodes/s':>11}{'templates':>11}"
        f"{'parse ms':>10}{'vs 100':>8}{'naive ms':>10}"
    )
    for size, median, templates, parse, naive in measured:
        print(
            f"{size:>6}{median * 1e3:>11.1f}{median / engine_100:>8.2f}"
            f"{size / median:>10.0f}{size * 50 / median:>11.0f}{templates:>11}"
            f"{parse * 1e3:>10.1f}{parse / parse_100:>8.2f}{naive * 1e3:>10.1f}"
        )

    print()
    print("a fleet job's batch: 200 executor trajectories of 12 nodes, 400 run members (median of 3)")
    print(f"{'value classifier':<34}{'engine ms':>11}{'traj/s':>10}")
    group, members = fleet_group(rng, 200)
    undo = uncached_value_kinds()
    try:
        uncached, _ = best_of(lambda: attribute_batch(group, run_members=members), 3, clock)
    finally:
        undo()

    def cold() -> None:
        generalize.string_kind.cache_clear()  # each batch starts with an empty cache: no help from the last
        attribute_batch(group, run_members=members)

    cached, _ = best_of(cold, 3, clock)
    for name, seconds in (("uncached (baseline)", uncached), ("cached, cold for each batch", cached)):
        print(f"{name:<34}{seconds * 1e3:>11.1f}{len(group) / seconds:>10.0f}")


if __name__ == "__main__":
    main()
