"""The embedded-mode demo: record a branching trajectory, finalize it and read it back as a tree."""

from __future__ import annotations

from rich.console import Console
from rich.tree import Tree

from cluster.capture import CaptureService
from cluster.core.trajectory import ExecutionResult, NodeIn, Outcome, ResultStatus, TrajectoryHeader
from cluster.settings import Settings
from cluster.stores.db import Database
from cluster.stores.migrate import upgrade
from cluster.stores.trajectories import TrajectoryLimits


def run_capture_demo(settings: Settings) -> None:
    console = Console()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.sql_url())
    db = Database(settings.sql_url())
    capture = CaptureService(db, TrajectoryLimits(settings.max_trajectory_nodes, settings.max_context_bytes))
    header = TrajectoryHeader(agent_id="demo-agent", role="executor", task="import 150 products", task_type="import")
    actions = ["add_item", "bulk_import"]
    root = NodeIn(
        context_snapshot={"goal": "import products", "row_count": 150},
        available_actions=actions,
        chosen_action="add_item",
        action_params={"name": "widget"},
        execution_result=ExecutionResult(status=ResultStatus.FAILURE, summary="timed out after 40 rows"),
    )
    retry = NodeIn(
        parent_id=root.node_id,
        context_snapshot={"goal": "import products", "row_count": 150},
        available_actions=actions,
        chosen_action="bulk_import",
        action_params={"file": "products.csv"},
        execution_result=ExecutionResult(status=ResultStatus.SUCCESS),
    )
    capture.record(settings.local_owner, header.trajectory_id, [root, retry], header=header)
    capture.finalize(settings.local_owner, header.trajectory_id, Outcome(status=ResultStatus.SUCCESS))
    loaded = capture.load(settings.local_owner, header.trajectory_id)

    tree = Tree(f"[bold]{loaded.header.task}[/] ({loaded.status.value}, outcome {loaded.outcome.status.value})")  # type: ignore[union-attr]
    branches = {None: tree}
    for node in loaded.nodes:
        label = f"{node.chosen_action}({node.action_params}) → {node.execution_result.status.value}"
        branches[node.node_id] = branches[node.parent_id].add(label)  # type: ignore[index]
    console.print(tree)
    console.print(f"stored in {settings.sql_url()}")
    db.dispose()
