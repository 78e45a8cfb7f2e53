"""The experience library: serve templates to agents, learn new ones, move confidence with outcomes.

SQL (``cluster.experience.repository``) is the source of truth; Milvus
(``cluster.experience.index``) holds one vector per template plus the fields queries filter
on. A write commits to SQL first and then updates Milvus; if Milvus fails after the commit the
index is behind, queries re-check confidence and ownership against SQL, and :meth:`reindex`
brings Milvus back in line.

Library versions (docs/jobs.md, "Library versions"): every template belongs to one numbered
version of its owner's library, and a pointer in SQL names the active one. A query reads the
pointer once and filters both the Milvus search and the SQL read by that version, so an answer
comes from one version even when a promote commits in between. Live learning, manual edits and
imports write into the version active when their transaction takes the owner's lock; a switch
takes the same lock, so each write lands wholly in the version active at its commit.
:meth:`create_version` builds a new, inactive version beside the active one (reprocess, import);
``cluster.experience.versions`` promotes and rolls back.

:class:`ExperienceService` is the entry point the MCP tools, the workers, the jobs and the CLI
call; the work is done by its parts, each a module of its own:

- :mod:`cluster.experience.query` (:class:`~cluster.experience.query.Queries`): serving, ranking,
  the candidates below the threshold;
- :mod:`cluster.experience.feedback` (:class:`~cluster.experience.feedback.Feedback`): the outcomes
  agents report on what they were served;
- :mod:`cluster.experience.learning` (:class:`~cluster.experience.learning.Learning`): what the
  attribution engine found, merged into the active version or built into a new one;
- :mod:`cluster.experience.authoring` (:class:`~cluster.experience.authoring.Authoring`):
  hand-written templates and edits, export and import;

and, under them, :mod:`cluster.experience.indexing` writes vectors after each commit and rebuilds
them, and :mod:`cluster.experience.ownership` checks owners and names owners' copies.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence

from sqlalchemy.orm import Session

from actors.engine.model.templates import ExperienceTemplate
from actors.engine.retire import ActionOutcome
from cluster.core.errors import InvalidInput
from cluster.core.ports import Embedder
from cluster.experience.authoring import Authoring
from cluster.experience.feedback import Feedback
from cluster.experience.indexing import Indexing
from cluster.experience.learning import Learning
from cluster.experience.models import (
    MAX_TOP_K,
    ConfidenceChange,
    ExperienceQueryResult,
    ImportReport,
    LearnReport,
    LibrarySource,
    OutcomeReport,
    RoleLibraries,
    Situation,
    TemplateEdit,
)
from cluster.experience.ownership import IMPORT_NAMESPACE, VERSION_NAMESPACE, check_owner
from cluster.experience.ports import ExperienceIndex
from cluster.experience.query import Queries
from cluster.experience.repository import SqlExperienceStore
from cluster.storage.db import Database

__all__ = ["DEFAULT_VERSIONS_KEPT", "IMPORT_NAMESPACE", "VERSION_NAMESPACE", "ExperienceService"]

DEFAULT_VERSIONS_KEPT = 5


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
        roles: roles that learn into and are served from one library (the ``shared_roles`` setting).
        value_nearness: the ``value_nearness`` setting (:mod:`cluster.experience.nearness`).
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
        value_nearness: float | None = None,
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
        self.indexing = Indexing(db, index, embedder)
        self.queries = Queries(
            db,
            index,
            embedder,
            top_k=self.top_k,
            confidence_threshold=confidence_threshold,
            roles=self.roles,
            value_nearness=value_nearness,
        )
        self.feedback = Feedback(db, index, self.indexing)
        self.learning = Learning(db, index, self.indexing, versions_kept=versions_kept)
        self.authoring = Authoring(db, self.indexing)

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
        """The owner's templates for this situation, best first, with a prompt block
        (:meth:`Queries.query_experience <cluster.experience.query.Queries.query_experience>`)."""
        return self.queries.query_experience(
            owner,
            context,
            role,
            task_type,
            top_k,
            min_confidence,
            include_other_roles,
            situation=situation,
            include_inapplicable=include_inapplicable,
        )

    def get_template(self, owner: str, template_id: uuid.UUID) -> ExperienceTemplate:
        with self.db.transaction() as session:
            return SqlExperienceStore(session).get(check_owner(owner), template_id)

    def history(self, owner: str, template_id: uuid.UUID) -> list[ConfidenceChange]:
        """The template's confidence changes, oldest first. Raises ``NotFound``."""
        with self.db.transaction() as session:
            return SqlExperienceStore(session).history(check_owner(owner), template_id)

    def count(self, owner: str, version: int | None = None) -> int:
        """Templates in the owner's library: the active version's, or ``version``'s."""
        with self.db.read() as session:
            store = SqlExperienceStore(session)
            return store.count(check_owner(owner), store.active_version(owner) if version is None else version)

    # --- learning ---------------------------------------------------------------------------

    def learn(self, owner: str, templates: Sequence[ExperienceTemplate]) -> LearnReport:
        """Store templates from the attribution engine in a transaction of their own, then index them
        (:meth:`Learning.learn <cluster.experience.learning.Learning.learn>`)."""
        return self.learning.learn(owner, templates)

    def learn_in(
        self,
        session: Session,
        owner: str,
        templates: Sequence[ExperienceTemplate],
        outcomes: Sequence[ActionOutcome] = (),
    ) -> LearnReport:
        """Merge templates into the owner's library inside the caller's unit of work
        (:meth:`Learning.learn_in <cluster.experience.learning.Learning.learn_in>`)."""
        return self.learning.learn_in(session, owner, templates, outcomes)

    def index_pending(self, owner: str | None = None, batch_size: int = 256) -> int:
        """Write the vectors of every template version marked "to index" (one owner's, or all)
        (:meth:`Indexing.index_pending <cluster.experience.indexing.Indexing.index_pending>`)."""
        return self.indexing.index_pending(owner, batch_size)

    def create_version(
        self,
        owner: str,
        templates: Sequence[ExperienceTemplate],
        source: LibrarySource,
        note: str = "",
        outcomes: Sequence[ActionOutcome] = (),
    ) -> int:
        """Build a new library version of ``templates`` beside the active one; returns its number
        (:meth:`Learning.create_version <cluster.experience.learning.Learning.create_version>`)."""
        return self.learning.create_version(owner, templates, source, note, outcomes)

    # --- outcome feedback -------------------------------------------------------------------

    def report_outcome(
        self,
        owner: str,
        template_ids: Sequence[uuid.UUID],
        succeeded: bool,
        trajectory_id: uuid.UUID | None = None,
    ) -> OutcomeReport:
        """Served templates were applied and the task succeeded (confidence up) or failed (down)
        (:meth:`Feedback.report_outcome <cluster.experience.feedback.Feedback.report_outcome>`)."""
        return self.feedback.report_outcome(owner, template_ids, succeeded, trajectory_id)

    # --- manual authoring, export / import --------------------------------------------------

    def add_template(self, owner: str, template: ExperienceTemplate) -> ExperienceTemplate:
        """Add a hand-written template (bootstrap); its source becomes ``manual``
        (:meth:`Authoring.add_template <cluster.experience.authoring.Authoring.add_template>`)."""
        return self.authoring.add_template(owner, template)

    def edit_template(self, owner: str, template_id: uuid.UUID, edit: TemplateEdit) -> ExperienceTemplate:
        """Change a template by hand
        (:meth:`Authoring.edit_template <cluster.experience.authoring.Authoring.edit_template>`)."""
        return self.authoring.edit_template(owner, template_id, edit)

    def export_library(self, owner: str) -> Iterator[str]:
        """The owner's library (its active version) as JSON Lines
        (:meth:`Authoring.export_library <cluster.experience.authoring.Authoring.export_library>`)."""
        return self.authoring.export_library(owner)

    def import_library(self, owner: str, lines: Iterable[str]) -> ImportReport:
        """Add templates from an export, skipping what the library already holds
        (:meth:`Authoring.import_library <cluster.experience.authoring.Authoring.import_library>`)."""
        return self.authoring.import_library(owner, lines)

    # --- index maintenance ------------------------------------------------------------------

    def reindex(self, owner: str | None = None, batch_size: int = 512) -> int:
        """Rebuild the Milvus rows of one owner (or of every owner) from SQL; returns rows written
        (:meth:`Indexing.reindex <cluster.experience.indexing.Indexing.reindex>`)."""
        return self.indexing.reindex(owner, batch_size)
