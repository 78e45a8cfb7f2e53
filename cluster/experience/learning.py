"""What the attribution engine found, stored: merged into the active library, or built into a new version.

Live learning (:meth:`Learning.learn_in`) merges templates into the owner's active version inside
the caller's unit of work (analysis marks the trajectories analysed in the same transaction).
A reprocess run or an import builds a new, inactive version beside the active one
(:meth:`Learning.create_version`); ``cluster.experience.versions`` promotes and rolls back. The
merge rules (near-duplicates add support, edge cases link to a parent, contradicted templates
retire) are the engine's pure functions (``actors.engine``); this module only stores their results.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy.orm import Session

from actors.engine import contradicted, merge_into_library
from actors.engine.model.templates import ExperienceTemplate
from actors.engine.retire import ActionOutcome
from cluster.core.errors import InvalidInput, StoreUnavailable
from cluster.experience.authoring import import_into
from cluster.experience.indexing import Indexing
from cluster.experience.models import ConfidenceReason, LearnReport, LibrarySource
from cluster.experience.ownership import check_owner, owned_id
from cluster.experience.ports import ExperienceIndex
from cluster.experience.repository import SqlExperienceStore
from cluster.experience.versions import keep_reported
from cluster.storage.db import Database

logger = logging.getLogger(__name__)


class Learning:
    """Stores templates from the attribution engine.

    Args:
        db: the SQL database (source of truth).
        index: the vector index (the vectors of pruned versions are deleted from it).
        indexing: writes the vectors of what was stored, after the commit.
        versions_kept: library versions kept per owner when a new one is made (the active and the
            previous one are always kept too); older ones are deleted with their vectors.
    """

    def __init__(self, db: Database, index: ExperienceIndex, indexing: Indexing, *, versions_kept: int) -> None:
        self.db = db
        self.index = index
        self.indexing = indexing
        self.versions_kept = versions_kept

    def learn(self, owner: str, templates: Sequence[ExperienceTemplate]) -> LearnReport:
        """Store templates from the attribution engine in a transaction of their own, then index
        them (see :meth:`learn_in` and :meth:`Indexing.index_pending`). Analysis composes the same two
        steps with the trajectories' analysed mark (``cluster.analysis.learn_batch``)."""
        with self.db.transaction() as session:
            report = self.learn_in(session, owner, templates)
        self.indexing.index_pending(owner)
        return report

    def learn_in(
        self,
        session: Session,
        owner: str,
        templates: Sequence[ExperienceTemplate],
        outcomes: Sequence[ActionOutcome] = (),
    ) -> LearnReport:
        """Merge templates into the owner's library inside the caller's unit of work.

        Near-duplicates merge into the existing template (support adds up, evidence already
        counted is not counted again); an edge case of an existing family becomes a supplementary
        template linked to the family's root. With the batch's ``outcomes``, a stored template they
        contradict is retired (kept with its reason, never served) and its repaired successor is
        stored beside it (``actors.engine.retire``). Every row written carries a "to index" mark:
        its vector is written after the commit, by :meth:`Indexing.index_pending`, never inside the
        transaction.
        """
        check_owner(owner)
        store = SqlExperienceStore(session)
        store.lock_owner(owner)
        version = store.writable_version(owner)
        # The engine names a template by its content alone; two owners (or two versions) learning
        # the same rule must still get templates of their own (ids are a global key in SQL and Milvus).
        templates = [t.model_copy(update={"template_id": owned_id(owner, t.template_id, version)}) for t in templates]
        signatures = list(dict.fromkeys([*(t.signature for t in templates), *(o.signature for o in outcomes)]))
        existing = store.families(owner, signatures, version)
        result = merge_into_library(existing, templates, outcomes)
        for template in (*result.new, *result.supplementary):
            store.insert(owner, template, version=version)
        for template in (*result.updated, *result.retired):
            store.replace(owner, template, ConfidenceReason.MERGED)
        # One line per template an operator would want to know of; merges (support adding up) are routine.
        for kind, learned in (("new", result.new), ("supplementary", result.supplementary)):
            for template in learned:
                logger.info(
                    "learned %s template %s for %s (%s/%s): %s",
                    kind,
                    template.template_id.hex[:8],
                    owner,
                    template.role,
                    template.task_type or "*",
                    template.brief(),
                )
        for template in result.retired:
            logger.info(
                "retired template %s of %s: %s", template.template_id.hex[:8], owner, template.retired_reason or ""
            )
        if result.updated:
            logger.debug("merged new evidence into %d templates of %s", len(result.updated), owner)
        return LearnReport(
            new=tuple(t.template_id for t in result.new),
            merged=tuple(t.template_id for t in result.updated),
            supplementary=tuple(t.template_id for t in result.supplementary),
            retired=tuple(t.template_id for t in result.retired),
        )

    def create_version(
        self,
        owner: str,
        templates: Sequence[ExperienceTemplate],
        source: LibrarySource,
        note: str = "",
        outcomes: Sequence[ActionOutcome] = (),
    ) -> int:
        """Build a new library version of ``templates`` beside the active one; returns its number.

        The version is not served until it is promoted (``cluster.experience.versions``). Templates
        found by attribution (a reprocess run) merge with each other as live learning merges them,
        checked against the run's pooled ``outcomes``; the active version's templates those
        outcomes contradict are kept in the new version retired, with the reason (never served),
        so the version says what it no longer believes and why. With source ``import`` templates
        are read as an import file is (duplicates skipped, source ``import``).
        Versions beyond the newest ``versions_kept`` (never the active or the previous one) are
        deleted, SQL rows first, then their vectors. All or nothing in SQL; the new version's
        vectors are written after the commit (see :meth:`Indexing.index_pending`).

        Raises:
            InvalidInput: ``source`` is ``live`` (live learning writes into the active version).
        """
        check_owner(owner)
        if source is LibrarySource.LIVE:
            raise InvalidInput("a new version is made by a reprocess run or an import, not live learning")
        if "\x00" in note:
            raise InvalidInput("NUL bytes are not allowed in note")
        with self.db.transaction() as session:
            store = SqlExperienceStore(session)
            store.lock_owner(owner)
            version = store.add_version(owner, source, note)
            if source is LibrarySource.IMPORT:
                import_into(store, owner, templates, version)
            else:
                owned = [
                    t.model_copy(update={"template_id": owned_id(owner, t.template_id, version)}) for t in templates
                ]
                result = merge_into_library([], owned, outcomes)
                judged = {o.signature for o in outcomes}
                signatures = sorted(judged | {t.signature for t in result.library})
                previous = store.families(owner, signatures, store.active_version(owner))
                # What agents reported about a rule is no evidence the stored trajectories hold: each
                # rebuilt template takes the outcomes of the active template it replaces.
                rebuilt = keep_reported(result.library, previous)
                dropped = [
                    t.model_copy(update={"template_id": owned_id(owner, t.template_id, version), "parent_id": None})
                    for t in contradicted([p for p in previous if p.signature in judged], outcomes)
                ]
                for template in (*rebuilt, *dropped):
                    store.insert(owner, template, version=version)
            pruned = store.prune(owner, self.versions_kept)
        if pruned:
            try:
                self.index.delete(owner, pruned)
            except StoreUnavailable as exc:
                # Harmless meanwhile: no query names a deleted version; a reindex removes them.
                logger.warning("vectors of %d pruned templates of %s remain in the index: %s", len(pruned), owner, exc)
        logger.info(
            "built library version %d of %s (%s), %d templates of pruned versions removed",
            version,
            owner,
            source,
            len(pruned),
        )
        self.indexing.index_pending(owner)
        return version
