"""Library versions of one owner: list, compare, promote and roll back (``hindsight library``).

Everything here is SQL only: a switch is one transaction that updates the owner's head row, so a
query (which reads the head once, see ``ExperienceService.query_experience``) is answered wholly
from the version before or wholly from the version after. Building a version needs the index and
the embedder, so it lives on the service (``ExperienceService.create_version``).

What a rebuilt version keeps of the one it replaces is decided here too (:func:`counterpart`,
:func:`with_reported`): the outcomes agents reported about a rule are not evidence a rebuild can
find again in the stored trajectories, so they go with the rule into the new version.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from actors.engine import carry_feedback
from actors.engine.model.templates import ExperienceTemplate
from cluster.core.errors import Conflict, NotFound
from cluster.core.owner import check_owner
from cluster.experience.models import (
    ConfidenceReason,
    DiffEntry,
    LibraryDiff,
    LibrarySwitch,
    LibraryVersion,
)
from cluster.experience.repository import SqlExperienceStore
from cluster.storage.db import Database

logger = logging.getLogger(__name__)


class LibraryVersions:
    """The versions of owners' experience libraries, on the SQL database alone.

    Args:
        db: the SQL database the experience service uses.
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    def versions(self, owner: str) -> list[LibraryVersion]:
        """The owner's versions, oldest first (empty for an owner that never learned anything)."""
        with self.db.read() as session:
            return SqlExperienceStore(session).versions(check_owner(owner))

    def active(self, owner: str) -> int:
        with self.db.read() as session:
            return SqlExperienceStore(session).active_version(check_owner(owner))

    def promote(self, owner: str, version: int, *, force: bool = False) -> LibrarySwitch:
        """Serve ``version`` from now on; the version served until now becomes the one rollback returns to.

        Raises:
            NotFound: no such version.
            Conflict: some of its templates have no vector yet (queries would miss them); wait
                for the indexer or run ``hindsight reindex``, or pass ``force``.
        """
        check_owner(owner)
        with self.db.transaction() as session:
            store = SqlExperienceStore(session)
            store.lock_owner(owner)
            if not store.has_version(owner, version):
                raise NotFound(f"library version {version} not found")
            pending = store.unindexed(owner, version)
            if pending and not force:
                raise Conflict(f"library version {version} has {pending} templates not yet indexed")
            carried = take_reported(store, owner, version)
            switch = store.switch(owner, version)
        logger.info(
            "library of %s: version %d active (previous %s), outcomes taken along by %d templates",
            owner,
            switch.active,
            switch.previous,
            carried,
        )
        return switch

    def rollback(self, owner: str) -> LibrarySwitch:
        """Serve the previously active version again (a second rollback undoes the first).

        Raises:
            NotFound: there is no previous version (never switched, or it was pruned).
        """
        check_owner(owner)
        with self.db.transaction() as session:
            store = SqlExperienceStore(session)
            store.lock_owner(owner)
            previous = store.previous_version(owner)
            if previous is None or not store.has_version(owner, previous):
                raise NotFound("no previous library version to roll back to")
            take_reported(store, owner, previous)
            switch = store.switch(owner, previous)
        logger.info("library of %s rolled back: version %d active", owner, switch.active)
        return switch

    def diff(self, owner: str, a: int, b: int) -> LibraryDiff:
        """What changed from version ``a`` to ``b``: rules added, removed, and the same rule with another confidence.

        Rules are matched by what they advise (role, task type, signature, condition, actions:
        :func:`rule_key`), since each version names its templates anew; a rule whose rationale or
        caveats were only worded anew is the same rule, not one removed and one added.

        Raises:
            NotFound: either version does not exist.
        """
        check_owner(owner)
        with self.db.read() as session:
            store = SqlExperienceStore(session)
            for version in (a, b):
                if not store.has_version(owner, version):
                    raise NotFound(f"library version {version} not found")
            left = _by_content(t for t, _ in store.iter_owner(owner, version=a))
            right = _by_content(t for t, _ in store.iter_owner(owner, version=b))
        added = [_entry(key, None, right[key]) for key in right if key not in left]
        removed = [_entry(key, left[key], None) for key in left if key not in right]
        both = [key for key in left if key in right]
        changed = [_entry(key, left[key], right[key]) for key in both if left[key].confidence != right[key].confidence]
        return LibraryDiff(
            owner=owner,
            a=a,
            b=b,
            added=tuple(sorted(added, key=_order)),
            removed=tuple(sorted(removed, key=_order)),
            changed=tuple(sorted(changed, key=_order)),
            unchanged=len(both) - len(changed),
        )


def counterpart(template: ExperienceTemplate, others: Sequence[ExperienceTemplate]) -> ExperienceTemplate | None:
    """The template of ``others`` (another library version) that states the same rule as ``template``.

    Each version names its templates anew, so a rule is recognised by what it advises: the same
    decision signature, recommended tool and avoided tool. Where several of ``others`` advise that,
    the closest wins: one in force before a retired one, then the same condition, then a condition
    on the same features, then the one agents reported most outcomes about (so that feedback is
    not passed over for a template nobody reported on), then the oldest.
    """
    advice = _advice(template)
    same = [o for o in others if _advice(o) == advice]
    if not same:
        return None
    condition, features = template.condition.render(), _features(template)
    return min(
        same,
        key=lambda o: (
            o.retired_reason is not None,
            o.condition.render() != condition,
            _features(o) != features,
            -_reported(o),
            o.created_at,
            str(o.template_id),
        ),
    )


def with_reported(template: ExperienceTemplate, replaced: ExperienceTemplate | None) -> ExperienceTemplate:
    """``template`` knowing at least the served outcomes agents reported about ``replaced``, the
    template of the version it replaces (:func:`actors.engine.carry_feedback` adds what it lacks).

    At least, not in addition: a rebuilt template knows none yet and takes them all, and taking
    them again (a switch after the build, a retried build) adds nothing twice. A template whose
    confidence was set by hand (no belief) has no counted outcomes to give.
    """
    if replaced is None or replaced.belief is None:
        return template
    have = template.belief
    ok = replaced.belief.served_ok - (have.served_ok if have else 0)
    failed = replaced.belief.served_failed - (have.served_failed if have else 0)
    return carry_feedback(template, max(0, ok), max(0, failed))


def keep_reported(
    rebuilt: Sequence[ExperienceTemplate], previous: Sequence[ExperienceTemplate]
) -> list[ExperienceTemplate]:
    """Each of ``rebuilt`` with the outcomes reported about its :func:`counterpart` in ``previous``."""
    by_signature: dict[str, list[ExperienceTemplate]] = {}
    for template in previous:
        by_signature.setdefault(template.signature, []).append(template)
    return [with_reported(t, counterpart(t, by_signature.get(t.signature, ()))) for t in rebuilt]


def take_reported(store: SqlExperienceStore, owner: str, version: int, page: int = 500) -> int:
    """Before ``version`` replaces the active version: give its templates the outcomes reported
    about their counterparts there since it was built. Call under :meth:`SqlExperienceStore.lock_owner`.

    Returns how many templates changed; their vectors' confidence is written after the commit
    (they are marked "to index"). Read a page at a time: a library is not held whole.
    """
    active = store.active_version(owner)
    if active == version:
        return 0
    changed: list[ExperienceTemplate] = []
    batch: list[ExperienceTemplate] = []

    def flush() -> None:
        previous = store.families(owner, [t.signature for t in batch], active)
        for template, kept in zip(batch, keep_reported(batch, previous), strict=True):
            if kept is not template:
                changed.append(kept.model_copy(update={"updated_at": datetime.now(UTC)}))
        batch.clear()

    for template, _ in store.iter_owner(owner, version=version):
        if template.retired_reason is None:  # never served: nothing to report about it
            batch.append(template)
        if len(batch) >= page:
            flush()
    flush()
    for template in changed:
        store.replace(owner, template, ConfidenceReason.CARRIED)
    return len(changed)


def _advice(template: ExperienceTemplate) -> tuple[str, str, str | None]:
    return (template.signature, template.recommended.tool, template.avoid.tool if template.avoid else None)


def _features(template: ExperienceTemplate) -> frozenset[str]:
    return frozenset(p.feature for p in template.condition.predicates)


def _reported(template: ExperienceTemplate) -> int:
    return 0 if template.belief is None else template.belief.served_ok + template.belief.served_failed


def rule_key(template: ExperienceTemplate) -> str:
    """Hash of the rule a template states: where (role, task type, signature, condition) and what
    (recommended and avoided action), not how its text words it."""
    rule = template.model_dump(
        mode="json", include={"role", "task_type", "signature", "condition", "recommended", "avoid"}
    )
    return hashlib.sha256(json.dumps(rule, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _by_content(templates: Iterable[ExperienceTemplate]) -> dict[str, ExperienceTemplate]:
    """Templates keyed by rule; of two with one rule (rare: a merge keeps them apart) the older wins."""
    found: dict[str, ExperienceTemplate] = {}
    for template in templates:
        found.setdefault(rule_key(template), template)
    return found


def _entry(key: str, a: ExperienceTemplate | None, b: ExperienceTemplate | None) -> DiffEntry:
    template = b if b is not None else a
    assert template is not None
    return DiffEntry(
        content_hash=key,
        role=template.role,
        task_type=template.task_type,
        rule=template.brief(),
        confidence_a=None if a is None else a.confidence,
        confidence_b=None if b is None else b.confidence,
    )


def _order(entry: DiffEntry) -> tuple[str, str, str]:
    return (entry.role, entry.task_type or "", entry.rule)
