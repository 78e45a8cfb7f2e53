"""The experience library: serve templates to agents, learn new ones, move confidence with outcomes.

SQL (``cluster.experience.repository``) is the source of truth; Milvus
(``cluster.experience.index``) holds one vector per template plus the fields queries filter
on. A write commits to SQL first and then updates Milvus; if Milvus fails after the commit the
index is behind, queries re-check confidence and ownership against SQL, and :meth:`reindex`
brings Milvus back in line.

The merge rules (near-duplicates add support, edge cases link to a parent) and the confidence
update are the attribution engine's pure functions (``actors.engine``); this module only stores
their results.

Library versions (docs/jobs.md, "Library versions"): every template belongs to one numbered
version of its owner's library, and a pointer in SQL names the active one. A query reads the
pointer once and filters both the Milvus search and the SQL read by that version, so an answer
comes from one version even when a promote commits in between. Live learning, manual edits and
imports write into the version active when their transaction takes the owner's lock; a switch
takes the same lock, so each write lands wholly in the version active at its commit.
:meth:`create_version` builds a new, inactive version beside the active one (reprocess, import);
``cluster.experience.versions`` promotes and rolls back.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from actors.engine import apply_outcome, contradicted, merge_into_library
from actors.engine.features import Features
from actors.engine.retire import ActionOutcome
from actors.engine.serving import (
    Fit,
    applicable,
    fit,
    overruled,
    query_signature,
    rank_score,
    retry_stands,
    snapshot_features,
)
from cluster.core.errors import InvalidInput, NotFound, StoreUnavailable
from cluster.core.ports import Embedder
from cluster.core.types import canonical_json
from cluster.experience.exchange import export_lines, parse_export
from cluster.experience.models import (
    MAX_CANDIDATES,
    MAX_TOP_K,
    BelowThreshold,
    Candidate,
    ConfidenceChange,
    ConfidenceReason,
    ExperienceQueryResult,
    ImportReport,
    LearnReport,
    LibrarySource,
    OutcomeReport,
    RoleLibraries,
    ScoredTemplate,
    ServedExperience,
    Situation,
    TemplateEdit,
    content_hash,
)
from cluster.experience.ports import ExperienceIndex, IndexRow
from cluster.experience.repository import FIRST_VERSION, SqlExperienceStore
from cluster.experience.templates import ExperienceTemplate, TemplateSource, render_prompt_block
from cluster.experience.versions import counterpart, keep_reported
from cluster.storage.db import Database

logger = logging.getLogger(__name__)

# Learned templates, and imported ones whose id is not already the owner's, get a stable id of
# the owner's own: uuid5(this, "owner:id").
IMPORT_NAMESPACE = uuid.UUID("5f0b7c1e-8d9a-4c55-9d47-3a1f6c2e8b10")
# Library versions after the first name their templates in this namespace: uuid5(this, "version:owner:id").
VERSION_NAMESPACE = uuid.UUID("b3c41f0e-2a57-4d9b-8e61-7f05d2c9a4e3")
_OVERFETCH = 2  # Milvus may be slightly behind SQL; fetch extra candidates and re-check them in SQL.
# With a situation, candidates for other decisions or with a false condition drop out after the search.
_SITUATION_OVERFETCH = 6
_SITUATION_POOL = 32
_SITUATION_TEXT_CHARS = 1000
DEFAULT_VERSIONS_KEPT = 5


def _check_owner(owner: str) -> str:
    if not owner or len(owner) > 200 or any(ord(c) < 32 for c in owner):
        raise InvalidInput("owner must be 1-200 printable characters")
    return owner


def _now() -> datetime:
    return datetime.now(UTC)


class ExperienceService:
    """Experience templates for many owners, isolated from each other.

    Args:
        db: the SQL database (source of truth).
        index: the vector index, e.g. ``MilvusExperienceIndex`` (derived; rebuilt by :meth:`reindex`).
        embedder: turns query contexts and template texts into unit vectors.
        top_k: default number of templates a query returns (capped at 8).
        confidence_threshold: default minimum confidence of a served template.
        versions_kept: library versions kept per owner when a new one is made (the active and the
            previous one are always kept too); older ones are deleted with their vectors.
    """

    def __init__(
        self,
        db: Database,
        index: ExperienceIndex,
        embedder: Embedder,
        *,
        top_k: int = 5,
        confidence_threshold: float = 0.7,
        versions_kept: int = DEFAULT_VERSIONS_KEPT,
        roles: RoleLibraries | None = None,
    ) -> None:
        if versions_kept < 1:
            raise InvalidInput("versions_kept must be at least 1")
        if embedder.dimension != index.dimension:
            raise InvalidInput(f"embedder makes {embedder.dimension}-d vectors, index holds {index.dimension}-d")
        self.db = db
        self.index = index
        self.embedder = embedder
        self.top_k = min(max(1, top_k), MAX_TOP_K)
        self.confidence_threshold = confidence_threshold
        self.versions_kept = versions_kept
        self.roles = roles or RoleLibraries()
        index.ensure_collection()

    # --- serving ----------------------------------------------------------------------------

    def query_experience(
        self,
        owner: str,
        context: str,
        role: str,
        task_type: str | None = None,
        top_k: int | None = None,
        min_confidence: float | None = None,
        include_other_roles: bool = False,
        *,
        situation: Situation | None = None,
        include_inapplicable: bool = False,
    ) -> ExperienceQueryResult:
        """The owner's templates for this situation, best first, with a prompt block.

        Only templates of ``role`` (or of its shared library, see ``RoleLibraries``) unless
        ``include_other_roles``; with ``task_type``, templates of
        that task type or of none. At most ``top_k`` (default ``experience_top_k``, hard cap 8),
        each with confidence ≥ ``min_confidence`` (default ``confidence_threshold``). An empty
        library gives an empty result.

        With a ``situation`` (context snapshot, available actions) each candidate's learned
        condition is checked against the snapshot and templates for other decisions are dropped;
        applicable ones rank first by :func:`actors.engine.serving.rank_score`. Templates whose
        condition is false are served only with ``include_inapplicable`` (last, marked so).
        Without one, templates rank by text relevance. ``context`` may be empty when a
        situation is sent.

        When none passes the threshold, ``below_threshold`` names the (at most three) templates a
        lower threshold would have served first, most confident first; nothing otherwise.

        Raises:
            InvalidInput: no context and no situation, top_k < 1 or min_confidence outside [0, 1].
        """
        _check_owner(owner)
        situation = situation if situation is not None and not situation.is_empty else None
        if "\x00" in context:
            raise InvalidInput("NUL bytes are not allowed in context")
        if not context.strip() and situation is None:
            raise InvalidInput("context must not be empty (or send the situation: context_snapshot, available_actions)")
        k = self.top_k if top_k is None else top_k
        if k < 1:
            raise InvalidInput("top_k must be at least 1")
        k = min(k, MAX_TOP_K)
        threshold = self.confidence_threshold if min_confidence is None else min_confidence
        if not 0.0 <= threshold <= 1.0:
            raise InvalidInput("min_confidence must be within [0, 1]")
        text = context if situation is None else _situation_text(context, task_type, situation)
        vector = self.embedder.embed([text])[0]
        # A situation filters candidates after the search, so it needs a deeper pool to fill k.
        limit = k * _OVERFETCH if situation is None else max(k * _SITUATION_OVERFETCH, _SITUATION_POOL)
        # Read the active version once and use it for the search and the SQL read alike: a promote
        # committing in between must not give an answer with templates of two versions.
        with self.db.read() as session:
            version = SqlExperienceStore(session).active_version(owner)
        # Roles sharing a library (the shared_roles setting) are served as one: the library's role,
        # and what its members learned before they shared it.
        served_roles = None if include_other_roles else self.roles.served_roles(role)
        role = self.roles.library(role)
        hits = self.index.search(
            owner,
            vector,
            limit=limit,
            version=version,
            roles=served_roles,
            task_type=task_type,
            min_confidence=threshold,
        )
        relevance = {h.template_id: h.score for h in hits}
        signature = None
        features = snapshot_features(situation.context_snapshot) if situation is not None else {}
        if situation is not None:
            signature = query_signature(
                role, task_type, context, situation.context_snapshot, situation.available_actions
            )
        with self.db.read() as session:
            store = SqlExperienceStore(session)
            templates = store.get_many(owner, list(relevance), version)
            if signature is not None:
                # Templates learned at exactly this decision are candidates even when their text
                # is not among the nearest: the structure says more than the words.
                for template in store.families(owner, [signature], version):
                    templates.setdefault(template.template_id, template)
        kept: list[ExperienceTemplate] = []
        below: list[ExperienceTemplate] = []
        for template in templates.values():
            if _servable(template, served_roles, task_type):
                # SQL has the last word: the index may lag behind a confidence drop or a role edit.
                (kept if template.confidence >= threshold else below).append(template)
        ranking = _Ranking(relevance, situation, features, signature, include_inapplicable)
        scored = ranking.rank(kept)[:k]
        missed = None
        if not scored and threshold > 0.0:
            # A situation's own decision came from SQL whatever its confidence: often enough.
            missed = _below_threshold(ranking, kept, below, threshold)
            if missed is None:
                # The search's filter left out everything under the threshold: one more, on a miss only.
                below += self._under(owner, vector, limit, version, served_roles, task_type, threshold, relevance)
                missed = _below_threshold(ranking, kept, below, threshold)
        return ExperienceQueryResult(
            experiences=tuple(_served(s) for s in scored),
            templates=tuple(scored),
            prompt_block=render_prompt_block([s.template for s in scored]),
            below_threshold=missed,
        )

    def _under(
        self,
        owner: str,
        vector: Sequence[float],
        limit: int,
        version: int,
        served_roles: Sequence[str] | None,
        task_type: str | None,
        threshold: float,
        relevance: dict[uuid.UUID, float],
    ) -> list[ExperienceTemplate]:
        """The nearest servable templates under ``threshold`` (their scores are added to ``relevance``)."""
        hits = self.index.search(
            owner, vector, limit=limit, version=version, roles=served_roles, task_type=task_type, min_confidence=0.0
        )
        fresh = {h.template_id: h.score for h in hits if h.template_id not in relevance}
        if not fresh:
            return []
        relevance.update(fresh)
        with self.db.read() as session:
            found = SqlExperienceStore(session).get_many(owner, list(fresh), version)
        return [t for t in found.values() if t.confidence < threshold and _servable(t, served_roles, task_type)]

    def get_template(self, owner: str, template_id: uuid.UUID) -> ExperienceTemplate:
        with self.db.transaction() as session:
            return SqlExperienceStore(session).get(_check_owner(owner), template_id)

    def history(self, owner: str, template_id: uuid.UUID) -> list[ConfidenceChange]:
        """The template's confidence changes, oldest first. Raises ``NotFound``."""
        with self.db.transaction() as session:
            return SqlExperienceStore(session).history(_check_owner(owner), template_id)

    def count(self, owner: str, version: int | None = None) -> int:
        """Templates in the owner's library: the active version's, or ``version``'s."""
        with self.db.read() as session:
            store = SqlExperienceStore(session)
            return store.count(_check_owner(owner), store.active_version(owner) if version is None else version)

    # --- learning ---------------------------------------------------------------------------

    def learn(self, owner: str, templates: Sequence[ExperienceTemplate]) -> LearnReport:
        """Store templates from the attribution engine in a transaction of their own, then index
        them (see :meth:`learn_in` and :meth:`index_pending`). Analysis composes the same two
        steps with the trajectories' analysed mark (``cluster.analysis.learn_batch``)."""
        with self.db.transaction() as session:
            report = self.learn_in(session, owner, templates)
        self.index_pending(owner)
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
        its vector is written after the commit, by :meth:`index_pending`, never inside the transaction.
        """
        _check_owner(owner)
        store = SqlExperienceStore(session)
        store.lock_owner(owner)
        version = store.writable_version(owner)
        # The engine names a template by its content alone; two owners (or two versions) learning
        # the same rule must still get templates of their own (ids are a global key in SQL and Milvus).
        templates = [t.model_copy(update={"template_id": _owned_id(owner, t.template_id, version)}) for t in templates]
        signatures = list(dict.fromkeys([*(t.signature for t in templates), *(o.signature for o in outcomes)]))
        existing = store.families(owner, signatures, version)
        result = merge_into_library(existing, templates, outcomes)
        for template in (*result.new, *result.supplementary):
            store.insert(owner, template, version=version)
        for template in (*result.updated, *result.retired):
            store.replace(owner, template, ConfidenceReason.MERGED)
        if result.new or result.updated or result.supplementary or result.retired:
            logger.info(
                "learned for %s: %d new, %d merged, %d supplementary, %d retired",
                owner,
                len(result.new),
                len(result.updated),
                len(result.supplementary),
                len(result.retired),
            )
        return LearnReport(
            new=tuple(t.template_id for t in result.new),
            merged=tuple(t.template_id for t in result.updated),
            supplementary=tuple(t.template_id for t in result.supplementary),
            retired=tuple(t.template_id for t in result.retired),
        )

    def index_pending(self, owner: str | None = None, batch_size: int = 256) -> int:
        """Write the vectors of every template version marked "to index" (one owner's, or all).

        Runs after the commit that marked them, outside any write transaction. If Milvus fails the
        marks stay and a later call (the next write, or the attribution workers' sweep) retries:
        nothing committed is lost. Returns how many vectors were written.
        """
        written = 0
        seen: set[tuple[uuid.UUID, datetime]] = set()
        while True:
            with self.db.read() as session:
                backlog = SqlExperienceStore(session).index_backlog(owner, batch_size)
            versions = {(t.template_id, t.updated_at) for _, t, _, _ in backlog}
            if not backlog or versions <= seen:
                return written
            seen |= versions
            try:
                by_owner: dict[str, list[tuple[ExperienceTemplate, str, int]]] = {}
                for row_owner, template, body, version in backlog:
                    by_owner.setdefault(row_owner, []).append((template, body, version))
                for row_owner, items in by_owner.items():
                    self._index(row_owner, items)
            except StoreUnavailable as exc:
                logger.warning("experience index is behind SQL (%d marked); will retry: %s", len(backlog), exc)
                return written
            with self.db.transaction() as session:
                store = SqlExperienceStore(session)
                for row_owner, items in by_owner.items():
                    store.mark_indexed(row_owner, [t for t, _, _ in items])
            written += len(backlog)
            if len(backlog) < batch_size:
                return written

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
        _check_owner(owner)
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
                    self.index_pending(owner)
        return OutcomeReport(changes=tuple(changes), already_counted=tuple(counted))

    # --- manual authoring -------------------------------------------------------------------

    def add_template(self, owner: str, template: ExperienceTemplate) -> ExperienceTemplate:
        """Add a hand-written template (bootstrap). Its source becomes ``manual``.

        Raises:
            Conflict: a template with this id exists.
            NotFound: ``parent_id`` is not one of the owner's templates.
        """
        _check_owner(owner)
        now = _now()
        template = template.model_copy(update={"source": TemplateSource.MANUAL, "created_at": now, "updated_at": now})
        with self.db.transaction() as session:
            store = SqlExperienceStore(session)
            store.lock_owner(owner)
            version = store.writable_version(owner)
            if template.parent_id is not None and not store.get_many(owner, [template.parent_id], version):
                raise NotFound(f"experience template {template.parent_id} not found in the active library version")
            store.insert(owner, template, ConfidenceReason.MANUAL, version=version)
        self.index_pending(owner)
        return template

    def edit_template(self, owner: str, template_id: uuid.UUID, edit: TemplateEdit) -> ExperienceTemplate:
        """Change a template by hand; a confidence change is recorded as ``manual``. Raises ``NotFound``."""
        _check_owner(owner)
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
                updated = ExperienceTemplate.model_validate({**current.model_dump(), **changes, "updated_at": _now()})
            except ValidationError as exc:
                raise InvalidInput(str(exc)) from exc
            store.replace(owner, updated, ConfidenceReason.MANUAL)
        self.index_pending(owner)
        return updated

    # --- library versions -------------------------------------------------------------------

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
        vectors are written after the commit (see :meth:`index_pending`).

        Raises:
            InvalidInput: ``source`` is ``live`` (live learning writes into the active version).
        """
        _check_owner(owner)
        if source is LibrarySource.LIVE:
            raise InvalidInput("a new version is made by a reprocess run or an import, not live learning")
        if "\x00" in note:
            raise InvalidInput("NUL bytes are not allowed in note")
        with self.db.transaction() as session:
            store = SqlExperienceStore(session)
            store.lock_owner(owner)
            version = store.add_version(owner, source, note)
            if source is LibrarySource.IMPORT:
                self._import_into(store, owner, templates, version)
            else:
                owned = [
                    t.model_copy(update={"template_id": _owned_id(owner, t.template_id, version)}) for t in templates
                ]
                result = merge_into_library([], owned, outcomes)
                judged = {o.signature for o in outcomes}
                signatures = sorted(judged | {t.signature for t in result.library})
                previous = store.families(owner, signatures, store.active_version(owner))
                # What agents reported about a rule is no evidence the stored trajectories hold: each
                # rebuilt template takes the outcomes of the active template it replaces.
                rebuilt = keep_reported(result.library, previous)
                dropped = [
                    t.model_copy(update={"template_id": _owned_id(owner, t.template_id, version), "parent_id": None})
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
        self.index_pending(owner)
        return version

    # --- export / import --------------------------------------------------------------------

    def export_library(self, owner: str) -> Iterator[str]:
        """The owner's library (its active version) as JSON Lines: a header, then one template per line
        (see docs/experience-format.md)."""
        _check_owner(owner)
        with self.db.read() as session:
            store = SqlExperienceStore(session)
            version = store.active_version(owner)
            count = store.count(owner, version)
            templates = [t for t, _ in store.iter_owner(owner, version=version)]
        yield from export_lines(
            [t.model_dump(mode="json") for t in templates], {"exported_at": _now().isoformat(), "count": count}
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
        _check_owner(owner)
        incoming = parse_export(lines)
        with self.db.transaction() as session:
            store = SqlExperienceStore(session)
            store.lock_owner(owner)
            report = self._import_into(store, owner, incoming, store.writable_version(owner))
        self.index_pending(owner)
        return report

    def _import_into(
        self, store: SqlExperienceStore, owner: str, incoming: Sequence[ExperienceTemplate], version: int
    ) -> ImportReport:
        """The import of :meth:`import_library` into library ``version``, under the caller's owner lock."""
        named = {t.template_id for t in incoming} | {t.parent_id for t in incoming if t.parent_id is not None}
        own = store.existing_ids(owner, sorted(named), version)
        mapped = {x: x if x in own else _owned_id(owner, x, version) for x in named}
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

    # --- index maintenance ------------------------------------------------------------------

    def reindex(self, owner: str | None = None, batch_size: int = 512) -> int:
        """Rebuild the Milvus rows of one owner (or of every owner) from SQL; returns rows written.

        Templates no longer in SQL are removed from the index.
        """
        if owner is None:
            with self.db.transaction() as session:
                owners = SqlExperienceStore(session).owners()
            self.index.drop()
            self.index.ensure_collection()
            return sum(self._reindex_owner(o, batch_size, fresh=True) for o in owners)
        return self._reindex_owner(_check_owner(owner), batch_size, fresh=False)

    def _reindex_owner(self, owner: str, batch_size: int, *, fresh: bool) -> int:
        stale = set() if fresh else self.index.ids(owner)
        written = 0
        with self.db.read() as session:
            items = list(SqlExperienceStore(session).iter_versions(owner, batch_size))
        for offset in range(0, len(items), batch_size):
            batch = items[offset : offset + batch_size]
            self._index(owner, batch)
            with self.db.transaction() as session:
                SqlExperienceStore(session).mark_indexed(owner, [t for t, _, _ in batch])
            written += len(batch)
            stale.difference_update(t.template_id for t, _, _ in batch)
        self.index.delete(owner, sorted(stale))
        logger.info("reindexed %d templates of %s (%d stale removed)", written, owner, len(stale))
        return written

    def _index(self, owner: str, items: Sequence[tuple[ExperienceTemplate, str, int]]) -> None:
        """Embed and upsert ``(template, text, library version)`` items of one owner."""
        if not items:
            return
        vectors = self.embedder.embed([body for _, body, _ in items])
        self.index.upsert(
            [IndexRow.of(owner, t, v, version=version) for (t, _, version), v in zip(items, vectors, strict=True)]
        )


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
    updated = apply_outcome(template, succeeded, _now())
    before, _ = store.replace(owner, updated, reason, trajectory_id)
    return ConfidenceChange(
        template_id=template.template_id,
        before=before,
        after=updated.confidence,
        reason=reason,
        trajectory_id=trajectory_id,
        at=updated.updated_at,
    )


def _servable(template: ExperienceTemplate, served_roles: Sequence[str] | None, task_type: str | None) -> bool:
    """Whether a query of these roles and task type may serve ``template``, confidence aside."""
    if served_roles is not None and template.role not in served_roles:
        return False
    if task_type is not None and template.task_type not in (task_type, None):
        return False
    return template.retired_reason is None  # a retired one is kept for the record, never served


@dataclass(frozen=True)
class _Ranking:
    """How one query ranks templates: by text relevance alone, or by their fit to the situation sent."""

    relevance: dict[uuid.UUID, float]
    situation: Situation | None
    features: Features
    signature: str | None
    include_inapplicable: bool

    def rank(self, templates: Sequence[ExperienceTemplate]) -> list[ScoredTemplate]:
        """``templates`` as served, best first (without the inapplicable ones unless asked for)."""
        scored: list[ScoredTemplate] = []
        situation = self.situation
        if situation is None:
            for template in templates:
                score = round(self.relevance.get(template.template_id, 0.0), 6)
                scored.append(ScoredTemplate(template=template, relevance=score, score=score))
        else:
            fits = overruled(
                [
                    (
                        t,
                        fit(t, situation.context_snapshot, self.features, situation.available_actions, self.signature),
                    )
                    for t in templates
                ],
                self.features,
            )
            judged_all = list(zip(templates, fits, strict=True))
            for template, judged in judged_all:
                if judged is Fit.NOT_APPLICABLE and not self.include_inapplicable:
                    continue
                # Served as it holds here: retry advice withdrawn where another rule says the call fails.
                stands = retry_stands(template, judged_all)
                served = template if stands == template.retry else template.model_copy(update={"retry": stands})
                score = round(self.relevance.get(template.template_id, 0.0), 6)
                scored.append(
                    ScoredTemplate(
                        template=served,
                        relevance=score,
                        applicable=applicable(judged),
                        score=rank_score(judged, template.confidence, score),
                    )
                )
        # Ties (equal scores) go to the more confident, then to the id, so answers are deterministic.
        scored.sort(
            key=lambda s: (s.applicable is not False, s.score, s.template.confidence, str(s.template.template_id)),
            reverse=True,
        )
        return scored


def _below_threshold(
    ranking: _Ranking, kept: Sequence[ExperienceTemplate], below: Sequence[ExperienceTemplate], threshold: float
) -> BelowThreshold | None:
    """The templates below ``threshold`` a lower threshold would have served first, most confident first."""
    if not below:
        return None
    # Ranked with the ones that passed: a rule that holds here can still put one below it in doubt.
    under = {t.template_id for t in below}
    nearest = [s.template for s in ranking.rank([*kept, *below]) if s.template.template_id in under]
    nearest = sorted(nearest[:MAX_CANDIDATES], key=lambda t: (-t.confidence, str(t.template_id)))
    if not nearest:
        return None
    return BelowThreshold(
        threshold=threshold,
        candidates=tuple(
            Candidate(
                id=t.template_id,
                recommended=t.recommended.tool,
                avoid=t.avoid.tool if t.avoid else None,
                confidence=t.confidence,
            )
            for t in nearest
        ),
    )


def _situation_text(context: str, task_type: str | None, situation: Situation) -> str:
    """What gets embedded for a structured query: the words sent, the decision and what is in view."""
    parts = [context.strip(), task_type or "", situation.decision or ""]
    if situation.available_actions:
        parts.append("actions: " + ", ".join(situation.available_actions))
    if situation.context_snapshot:
        parts.append(canonical_json(situation.context_snapshot)[:_SITUATION_TEXT_CHARS])
    return " ".join(p for p in parts if p)


def _served(scored: ScoredTemplate) -> ServedExperience:
    template = scored.template
    return ServedExperience(
        id=template.template_id,
        condition=template.condition.render(),
        recommended=template.recommended,
        avoid=template.avoid,
        avoid_reason=template.avoid_reason,
        confidence=template.confidence,
        applicable=scored.applicable,
        retry=template.retry,
        text=template.brief(),
    )


def _owned_id(owner: str, template_id: uuid.UUID, version: int = FIRST_VERSION) -> uuid.UUID:
    """A stable id for the owner's copy, in library ``version``, of a template named ``template_id`` elsewhere.

    Version 1 keeps the ids of the first release; later versions name theirs in a namespace of
    their own, so the same rule in two versions is two templates.
    """
    if version == FIRST_VERSION:
        return uuid.uuid5(IMPORT_NAMESPACE, f"{owner}:{template_id}")
    return uuid.uuid5(VERSION_NAMESPACE, f"{version}:{owner}:{template_id}")
