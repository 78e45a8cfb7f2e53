"""What the trajectory concept needs from others, as contracts they meet without being imported here.

Trajectories sit below experience: a finalize checks the experiences an outcome names, and batch
jobs group roles that share a library, through these ports. The composition root
(``cluster.services``) hands in the experience store; ``RoleLibraries`` meets :class:`RoleGrouping`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol


class ServedExperiences(Protocol):
    """An owner's experiences, read in the caller's unit of work (``SqlExperienceStore`` on its session)."""

    def existing_ids(self, owner: str, template_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of ``template_ids`` are experiences of ``owner``; the others are unknown or another owner's."""
        ...


class RoleGrouping(Protocol):
    """Which library each role learns into (``RoleLibraries``, the ``shared_roles`` setting)."""

    def library(self, role: str) -> str:
        """The role whose library ``role`` learns into; a role sharing none is its own."""
        ...
