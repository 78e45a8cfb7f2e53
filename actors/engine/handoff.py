"""Credit across roles: a failure late in a multi-agent run is also charged to the hand-offs before it.

The trajectories of one run (same owner and ``run_id``) hand off to each other in start order: the
planner's trajectory hands its plan to the executor's, which hands its work to the verifier's. A
trajectory's own labels (:mod:`actors.engine.labels`) only see its own leaves and outcome, so a
planner whose plan was executed and then failed verification looks like a success. Rules:

* A finalized trajectory *fails* when its final path is negative (its own leaf or outcome).
* A failing trajectory *owns* its failure when it shows that the hand-off it received could have
  worked: one of its own paths ended well, or at one decision point a choice of its own failed
  where a sibling with another action (same parent) succeeded. Then the failure is that role's
  own mistake, and nobody upstream is charged.
* Otherwise each earlier trajectory of the run, walking up from the failing one, is *blamed*: its
  final path (the one that ended in the hand-off) is labelled negative, as a trajectory's outcome
  is applied to its final path. The walk stops at the first earlier trajectory that failed on its
  own: that one is judged by the same rules in its turn.

A blamed trajectory is scored by the same scorer as any other, so the decisions leading to the
hand-off carry the failure in proportion to the credit they get (the last decision before the
hand-off, with nothing else below it, the most). Whether a template comes out is up to contrast
and sensitivity as always: a choice that failed through blame in one run and succeeded in another
with the same context teaches nothing.

Only finalized trajectories take part; a trajectory without a run is never blamed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

from actors.engine.labels import PathLabel, index_tree, label_paths
from actors.engine.model.trajectories import ResultStatus, Trajectory


def runs(trajectories: Iterable[Trajectory]) -> dict[tuple[str, str], list[Trajectory]]:
    """Finalized trajectories with a run, by (owner, run id), each run in hand-off (start) order.

    A trajectory listed twice counts once. Start ties break on the trajectory id, so the order
    never depends on the order of the input.
    """
    seen: dict[uuid.UUID, Trajectory] = {}
    for trajectory in trajectories:
        if trajectory.header.run_id is not None and trajectory.outcome is not None:
            seen.setdefault(trajectory.trajectory_id, trajectory)
    out: dict[tuple[str, str], list[Trajectory]] = {}
    for trajectory in seen.values():
        run_id = trajectory.header.run_id
        assert run_id is not None
        out.setdefault((trajectory.owner, run_id), []).append(trajectory)
    for members in out.values():
        members.sort(key=lambda t: (t.created_at, str(t.trajectory_id)))
    return out


def fails(trajectory: Trajectory) -> bool:
    """Its final path is negative: the trajectory's own leaf or outcome says it failed."""
    return any(p.final and p.label is PathLabel.NEGATIVE for p in label_paths(trajectory))


def owns_failure(trajectory: Trajectory) -> bool:
    """The trajectory shows that what it was handed could have worked (see the module docstring)."""
    if any(p.label is PathLabel.POSITIVE for p in label_paths(trajectory)):
        return True
    tree = index_tree(trajectory)
    roots = [nid for nid in tree.order if tree.parent[nid] is None]
    for group in (roots, *(tree.children[nid] for nid in tree.order)):
        nodes = [tree.by_id[nid] for nid in group]
        failed = {n.chosen_action for n in nodes if n.is_decision and n.execution_result.status is ResultStatus.FAILURE}
        worked = {n.chosen_action for n in nodes if n.execution_result.status is ResultStatus.SUCCESS}
        if any(f != w for f in failed for w in worked):
            return True
    return False


def blame(trajectories: Sequence[Trajectory]) -> dict[uuid.UUID, uuid.UUID]:
    """Blamed trajectories: the id of each one whose hand-off failed later in its run, mapped to the
    trajectory where the run failed (the nearest, when several failures reach it).

    Args:
        trajectories: Trajectories of any runs, any order; the runs should be complete as far as
            they are known (a member left out cannot blame, nor be blamed).
    """
    out: dict[uuid.UUID, uuid.UUID] = {}
    for members in runs(trajectories).values():
        failing = [fails(t) for t in members]
        for later in range(1, len(members)):
            if not failing[later] or owns_failure(members[later]):
                continue
            for earlier in range(later - 1, -1, -1):
                if failing[earlier]:
                    break
                out.setdefault(members[earlier].trajectory_id, members[later].trajectory_id)
    return out
