"""Library versions of one owner: list, compare, promote and roll back (``hindsight library``).

Everything here is SQL only: a switch is one transaction that updates the owner's head row, so a
query (which reads the head once, see ``ExperienceService.query_experience``) is answered wholly
from the version before or wholly from the version after. Building a version needs the index and
the embedder, so it lives on the service (``ExperienceService.create_version``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from cluster.core.errors import Conflict, InvalidInput, NotFound
from cluster.experience.models import DiffEntry, LibraryDiff, LibrarySwitch, LibraryVersion, content_hash
from cluster.experience.repository import SqlExperienceStore
from cluster.experience.templates import ExperienceTemplate
from cluster.storage.db import Database

logger = logging.getLogger(__name__)


def _check_owner(owner: str) -> str:
    if not owner or len(owner) > 200 or any(ord(c) < 32 for c in owner):
        raise InvalidInput("owner must be 1-200 printable characters")
    return owner


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
            return SqlExperienceStore(session).versions(_check_owner(owner))

    def active(self, owner: str) -> int:
        with self.db.read() as session:
            return SqlExperienceStore(session).active_version(_check_owner(owner))

    def promote(self, owner: str, version: int, *, force: bool = False) -> LibrarySwitch:
        """Serve ``version`` from now on; the version served until now becomes the one rollback returns to.

        Raises:
            NotFound: no such version.
            Conflict: some of its templates have no vector yet (queries would miss them); wait
                for the indexer or run ``hindsight reindex``, or pass ``force``.
        """
        _check_owner(owner)
        with self.db.transaction() as session:
            store = SqlExperienceStore(session)
            store.lock_owner(owner)
            if not store.has_version(owner, version):
                raise NotFound(f"library version {version} not found")
            pending = store.unindexed(owner, version)
            if pending and not force:
                raise Conflict(f"library version {version} has {pending} templates not yet indexed")
            switch = store.switch(owner, version)
        logger.info("library of %s: version %d active (previous %s)", owner, switch.active, switch.previous)
        return switch

    def rollback(self, owner: str) -> LibrarySwitch:
        """Serve the previously active version again (a second rollback undoes the first).

        Raises:
            NotFound: there is no previous version (never switched, or it was pruned).
        """
        _check_owner(owner)
        with self.db.transaction() as session:
            store = SqlExperienceStore(session)
            store.lock_owner(owner)
            previous = store.previous_version(owner)
            if previous is None or not store.has_version(owner, previous):
                raise NotFound("no previous library version to roll back to")
            switch = store.switch(owner, previous)
        logger.info("library of %s rolled back: version %d active", owner, switch.active)
        return switch

    def diff(self, owner: str, a: int, b: int) -> LibraryDiff:
        """What changed from version ``a`` to ``b``: rules added, removed, and the same rule with another confidence.

        Rules are matched by content (role, task type, signature, condition, actions, rationale,
        caveats: :func:`~cluster.experience.models.content_hash`), since each version names its
        templates anew.

        Raises:
            NotFound: either version does not exist.
        """
        _check_owner(owner)
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


def _by_content(templates: Iterable[ExperienceTemplate]) -> dict[str, ExperienceTemplate]:
    """Templates keyed by content hash; of two with one content (rare: a merge keeps them apart) the older wins."""
    found: dict[str, ExperienceTemplate] = {}
    for template in templates:
        found.setdefault(content_hash(template), template)
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
