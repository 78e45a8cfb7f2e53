"""Outcome feedback: served templates were applied, and the task succeeded or failed.

Confidence moves with each reported outcome (the engine's :func:`actors.engine.apply_outcome`). A
report naming its trajectory counts once per (trajectory, template). A template served before a
library switch and reported after it counts where it was served and on the active version's
template stating its rule (:func:`cluster.experience.versions.counterpart`), so a rebuild never
loses what agents report. Only confidence moves, so the index's filter field is updated in place
instead of re-embedding.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from actors.engine import apply_outcome
from actors.engine.model.templates import ExperienceTemplate
from cluster.core.errors import StoreUnavailable
from cluster.experience.indexing import Indexing
from cluster.experience.models import ConfidenceChange, ConfidenceReason, OutcomeReport
from cluster.experience.ownership import check_owner
from cluster.experience.ports import ExperienceIndex
from cluster.experience.repository import SqlExperienceStore
from cluster.experience.versions import counterpart
from cluster.storage.db import Database

logger = logging.getLogger(__name__)


class Feedback:
    """Counts the outcomes agents report on the templates they were served.

    Args:
        db: the SQL database (source of truth).
        index: the vector index, whose confidence field follows each change.
        indexing: writes rows the index did not take in place.
    """

    def __init__(self, db: Database, index: ExperienceIndex, indexing: Indexing) -> None:
        self.db = db
        self.index = index
        self.indexing = indexing

    def report_outcome(
        self,
        owner: str,
        template_ids: Sequence[uuid.UUID],
        succeeded: bool,
        trajectory_id: uuid.UUID | None = None,
    ) -> OutcomeReport:
        """Served templates were applied and the task succeeded (confidence up) or failed (down).

        With a ``trajectory_id`` each (trajectory, template) pair counts once: a retried report
        changes nothing. Without one, every call counts. All or nothing. A template of a library
        version no longer active (served before a switch) counts, and so does the active version's
        template stating its rule (:func:`cluster.experience.versions.counterpart`): a rebuild
        never loses what agents report about the library it replaced.

        Raises:
            NotFound: a template id is not the owner's.
        """
        check_owner(owner)
        reason = ConfidenceReason.SUCCESS if succeeded else ConfidenceReason.FAILURE
        changes: list[ConfidenceChange] = []
        counted: list[uuid.UUID] = []
        ids = list(dict.fromkeys(template_ids))
        with self.db.transaction() as session:
            store = SqlExperienceStore(session)
            # The lock a library switch takes (LibraryVersions): an outcome counted before a switch
            # is taken along by the version switched to, one counted after also lands there.
            store.lock_owner(owner)
            active = store.active_version(owner)
            in_active = store.existing_ids(owner, ids, active)
            for template_id in ids:
                template = store.get(owner, template_id, lock=True)
                change = _count(store, owner, template, succeeded, reason, trajectory_id)
                if change is None:
                    counted.append(template_id)
                    continue
                changes.append(change)
                if template_id in in_active:
                    continue
                # Served before a switch, reported after it: the rule it states is served from the
                # active version now, and the outcome counts there too (once per trajectory as well).
                family = store.families(owner, [template.signature], active)
                successor = counterpart(template, [t for t in family if t.retired_reason is None])
                if successor is not None and successor.template_id not in ids:
                    current = store.get(owner, successor.template_id, lock=True)
                    forwarded = _count(store, owner, current, succeeded, reason, trajectory_id)
                    if forwarded is not None:
                        changes.append(forwarded)
        if changes:
            # Only confidence moved: update the index's filter field in place instead of re-embedding.
            try:
                applied = self.index.set_confidence(owner, {c.template_id: (c.after, c.at) for c in changes})
            except StoreUnavailable as exc:
                logger.warning("confidence of %d templates not yet in the index; will retry: %s", len(changes), exc)
            else:
                with self.db.transaction() as session:
                    store = SqlExperienceStore(session)
                    # Several rows (a template and its successor): without the owner's lock this can
                    # wait on a report or switch that waits on it (Postgres reports a deadlock).
                    store.lock_owner(owner)
                    store.mark_indexed(owner, list(store.get_many(owner, sorted(applied)).values()))
                if len(applied) < len(changes):
                    # Rows the index did not return keep their marks and are written again in full.
                    self.indexing.index_pending(owner)
        return OutcomeReport(changes=tuple(changes), already_counted=tuple(counted))


def _count(
    store: SqlExperienceStore,
    owner: str,
    template: ExperienceTemplate,
    succeeded: bool,
    reason: ConfidenceReason,
    trajectory_id: uuid.UUID | None,
) -> ConfidenceChange | None:
    """Count one served outcome on ``template``; None when this trajectory's outcome was counted on it before."""
    if trajectory_id is not None and not store.claim_outcome(owner, template.template_id, trajectory_id, succeeded):
        return None
    updated = apply_outcome(template, succeeded, datetime.now(UTC))
    before, _ = store.replace(owner, updated, reason, trajectory_id)
    return ConfidenceChange(
        template_id=template.template_id,
        before=before,
        after=updated.confidence,
        reason=reason,
        trajectory_id=trajectory_id,
        at=updated.updated_at,
    )
