"""What people write into a library: hand-written templates and edits, and export/import files.

Manual templates and imports land in the owner's active library version under the owner's lock
(the lock a library switch takes), so each lands wholly in the version active at its commit. An
export is the active version as JSON Lines (docs/experience-format.md); an import skips what the
library already holds and merges near-duplicates, so importing one file twice changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from actors.engine import merge_into_library
from actors.engine.model.templates import ExperienceTemplate, TemplateSource
from cluster.core.errors import InvalidInput, NotFound
from cluster.experience.exchange import export_lines, parse_export
from cluster.experience.indexing import Indexing
from cluster.experience.models import ConfidenceReason, ImportReport, TemplateEdit, content_hash
from cluster.experience.ownership import check_owner, owned_id
from cluster.experience.repository import SqlExperienceStore
from cluster.storage.db import Database


class Authoring:
    """Hand-written templates, edits, and a library's export and import.

    Args:
        db: the SQL database (source of truth).
        indexing: writes the vectors of what was written, after the commit.
    """

    def __init__(self, db: Database, indexing: Indexing) -> None:
        self.db = db
        self.indexing = indexing

    def add_template(self, owner: str, template: ExperienceTemplate) -> ExperienceTemplate:
        """Add a hand-written template (bootstrap). Its source becomes ``manual``.

        Raises:
            Conflict: a template with this id exists.
            NotFound: ``parent_id`` is not one of the owner's templates.
        """
        check_owner(owner)
        now = datetime.now(UTC)
        template = template.model_copy(update={"source": TemplateSource.MANUAL, "created_at": now, "updated_at": now})
        with self.db.transaction() as session:
            store = SqlExperienceStore(session)
            store.lock_owner(owner)
            version = store.writable_version(owner)
            if template.parent_id is not None and not store.get_many(owner, [template.parent_id], version):
                raise NotFound(f"experience template {template.parent_id} not found in the active library version")
            store.insert(owner, template, ConfidenceReason.MANUAL, version=version)
        self.indexing.index_pending(owner)
        return template

    def edit_template(self, owner: str, template_id: uuid.UUID, edit: TemplateEdit) -> ExperienceTemplate:
        """Change a template by hand; a confidence change is recorded as ``manual``. Raises ``NotFound``."""
        check_owner(owner)
        changes: dict[str, Any] = {
            name: getattr(edit, name)
            for name in ("role", "task_type", "condition", "recommended", "avoid", "rationale", "caveats", "confidence")
            if getattr(edit, name) is not None
        }
        if edit.clear_avoid:
            changes["avoid"] = None
        if edit.confidence is not None:
            changes["belief"] = None  # a confidence set by hand replaces what it was computed from
        with self.db.transaction() as session:
            store = SqlExperienceStore(session)
            current = store.get(owner, template_id, lock=True)
            try:
                updated = ExperienceTemplate.model_validate(
                    {**current.model_dump(), **changes, "updated_at": datetime.now(UTC)}
                )
            except ValidationError as exc:
                raise InvalidInput(str(exc)) from exc
            store.replace(owner, updated, ConfidenceReason.MANUAL)
        self.indexing.index_pending(owner)
        return updated

    def export_library(self, owner: str) -> Iterator[str]:
        """The owner's library (its active version) as JSON Lines: a header, then one template per line
        (see docs/experience-format.md)."""
        check_owner(owner)
        with self.db.read() as session:
            store = SqlExperienceStore(session)
            version = store.active_version(owner)
            count = store.count(owner, version)
            templates = [t for t, _ in store.iter_owner(owner, version=version)]
        yield from export_lines(
            [t.model_dump(mode="json") for t in templates],
            {"exported_at": datetime.now(UTC).isoformat(), "count": count},
        )

    def import_library(self, owner: str, lines: Iterable[str]) -> ImportReport:
        """Add templates from an export, skipping what the library already holds.

        A template whose id is already the owner's, or whose content (rule, role, task type,
        signature) equals one of the owner's templates, is a duplicate and skipped; a near-duplicate
        merges (support adds up); the rest are added with source ``import``. Importing the same
        file twice changes nothing. All or nothing.

        Raises:
            InvalidInput: missing or unknown header, unsupported version, or a malformed line
                (the message names the line).
        """
        check_owner(owner)
        incoming = parse_export(lines)
        with self.db.transaction() as session:
            store = SqlExperienceStore(session)
            store.lock_owner(owner)
            report = import_into(store, owner, incoming, store.writable_version(owner))
        self.indexing.index_pending(owner)
        return report


def import_into(
    store: SqlExperienceStore, owner: str, incoming: Sequence[ExperienceTemplate], version: int
) -> ImportReport:
    """The import of :meth:`Authoring.import_library` into library ``version``, under the caller's owner lock."""
    named = {t.template_id for t in incoming} | {t.parent_id for t in incoming if t.parent_id is not None}
    own = store.existing_ids(owner, sorted(named), version)
    mapped = {x: x if x in own else owned_id(owner, x, version) for x in named}
    present = store.existing_ids(owner, sorted(set(mapped.values())), version)
    known_hashes = store.hashes(owner, [content_hash(t) for t in incoming], version)
    fresh: list[ExperienceTemplate] = []
    duplicates = 0
    for template in incoming:
        digest = content_hash(template)
        if mapped[template.template_id] in present or digest in known_hashes:
            duplicates += 1
            continue
        known_hashes.add(digest)
        update = {
            "template_id": mapped[template.template_id],
            "parent_id": mapped[template.parent_id] if template.parent_id else None,
            "source": TemplateSource.IMPORT,
        }
        fresh.append(template.model_copy(update=update))
    existing = store.families(owner, [t.signature for t in fresh], version)
    result = merge_into_library(existing, fresh)
    added = result.library[len(existing) :]
    written: list[tuple[ExperienceTemplate, str]] = []
    stored = set(present)
    for template in added:  # file order: a parent in the file comes before its children
        if template.parent_id is not None and template.parent_id not in stored:
            template = template.model_copy(update={"parent_id": None})  # parent merged away or absent
        written.append((template, store.insert(owner, template, ConfidenceReason.IMPORTED, version=version)))
        stored.add(template.template_id)
    for template in result.updated:
        _, body = store.replace(owner, template, ConfidenceReason.MERGED)
        written.append((template, body))
    return ImportReport(
        imported=tuple(t.template_id for t, _ in written[: len(added)]),
        merged=tuple(t.template_id for t in result.updated),
        duplicates=duplicates,
    )
