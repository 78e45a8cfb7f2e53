"""Whose templates: the ids of owners' copies (the owner check is :func:`cluster.core.owner.check_owner`).

Templates are stored per owner. A template the engine learned, or one read from an import file,
is named by its content or by whoever exported it; the owner's copy gets an id of its own, stable
for that owner and library version, so two owners (or two versions) never share a row.
"""

from __future__ import annotations

import uuid

from cluster.core.owner import check_owner
from cluster.experience.repository import FIRST_VERSION

__all__ = ["IMPORT_NAMESPACE", "VERSION_NAMESPACE", "check_owner", "owned_id"]

# Learned templates, and imported ones whose id is not already the owner's, get a stable id of
# the owner's own: uuid5(this, "owner:id").
IMPORT_NAMESPACE = uuid.UUID("5f0b7c1e-8d9a-4c55-9d47-3a1f6c2e8b10")
# Library versions after the first name their templates in this namespace: uuid5(this, "version:owner:id").
VERSION_NAMESPACE = uuid.UUID("b3c41f0e-2a57-4d9b-8e61-7f05d2c9a4e3")


def owned_id(owner: str, template_id: uuid.UUID, version: int = FIRST_VERSION) -> uuid.UUID:
    """A stable id for the owner's copy, in library ``version``, of a template named ``template_id`` elsewhere.

    Version 1 keeps the ids of the first release; later versions name theirs in a namespace of
    their own, so the same rule in two versions is two templates.
    """
    if version == FIRST_VERSION:
        return uuid.uuid5(IMPORT_NAMESPACE, f"{owner}:{template_id}")
    return uuid.uuid5(VERSION_NAMESPACE, f"{version}:{owner}:{template_id}")
