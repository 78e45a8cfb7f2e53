"""Two regional deployer roles meeting one decision: the EU deployers always restart everything and
fail, the US deployers always roll the restart and succeed. Neither role alone holds a contrast;
pooled, the lesson is plain."""

from __future__ import annotations

from actors.engine.model.trajectories import Trajectory
from cluster.experience.models import RoleLibraries
from tests.unit.engine.builders import Builder

TASK_TYPE = "deploy"
ACTIONS = ["rolling_restart", "restart_all"]
SHARED = RoleLibraries(shared={"deployer": ("deployer-eu", "deployer-us")})


def deploy(role: str, choice: str, ok: bool, i: int) -> Trajectory:
    b = Builder(role=role, task_type=TASK_TYPE, task="Deploy the service")
    b.header = b.header.model_copy(update={"agent_id": f"{role}-{i}"})
    root = b.add("fetch_build", context={"goal": "fetch the build"})
    context = {"goal": "roll out the build", "replicas": 3 + i}
    b.add(
        choice,
        ACTIONS,
        parent=root,
        context=context,
        status="success" if ok else "failure",
        summary=None if ok else "downtime alarm",
    )
    return b.build("success" if ok else "failure")


def regional_fleet(per_role: int = 3) -> list[Trajectory]:
    eu = [deploy("deployer-eu", "restart_all", False, i) for i in range(per_role)]
    us = [deploy("deployer-us", "rolling_restart", True, i) for i in range(per_role)]
    return eu + us
