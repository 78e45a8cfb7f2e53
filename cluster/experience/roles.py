"""Shared role libraries on the learning side: trajectories read under their library's role."""

from __future__ import annotations

from collections.abc import Sequence

from actors.engine.model.trajectories import Trajectory
from cluster.experience.models import RoleLibraries


def pooled_roles(trajectories: Sequence[Trajectory], roles: RoleLibraries) -> list[Trajectory]:
    """``trajectories`` as the learner reads them: each header's role replaced by its library's, so
    the roles of one library pool their evidence and their templates carry the library's role."""
    if not roles.shared:
        return list(trajectories)
    out: list[Trajectory] = []
    for t in trajectories:
        library = roles.library(t.header.role)
        if library != t.header.role:
            t = t.model_copy(update={"header": t.header.model_copy(update={"role": library})})
        out.append(t)
    return out
