"""The query path: an owner's templates for a situation, best first, with a prompt block.

A query reads the owner's active library version once and filters both the Milvus search and the
SQL read by it, so an answer comes from one version even when a promote commits in between. Milvus
finds candidates by meaning; SQL has the last word on each (confidence, role, retirement), since
the index may lag behind. With a situation (context snapshot, available actions), the templates
learned at exactly that decision are candidates too, and each candidate's condition is checked
against the snapshot (:mod:`actors.engine.serving`). When nothing passes the confidence threshold,
the answer names the templates a lower one would have served first.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from actors.engine.features import Features
from actors.engine.model.templates import ExperienceTemplate, render_prompt_block
from actors.engine.serving import (
    Fit,
    applicable,
    fit,
    never_worked,
    overruled,
    query_signature,
    rank_score,
    retry_stands,
    snapshot_features,
)
from cluster.core.errors import InvalidInput
from cluster.core.ports import Embedder
from cluster.core.types import canonical_json
from cluster.experience.models import (
    MAX_CANDIDATES,
    MAX_TOP_K,
    BelowThreshold,
    Candidate,
    ExperienceQueryResult,
    RoleLibraries,
    ScoredTemplate,
    ServedExperience,
    Situation,
)
from cluster.experience.nearness import StandIn, stand_ins, substituted, used_by
from cluster.experience.ownership import check_owner
from cluster.experience.ports import ExperienceIndex
from cluster.experience.repository import SqlExperienceStore
from cluster.storage.db import Database

_OVERFETCH = 2  # Milvus may be slightly behind SQL; fetch extra candidates and re-check them in SQL.
# With a situation, candidates for other decisions or with a false condition drop out after the search.
_SITUATION_OVERFETCH = 6
_SITUATION_POOL = 32
_SITUATION_TEXT_CHARS = 1000


class Queries:
    """Serves owners' templates.

    Args:
        db: the SQL database (source of truth).
        index: the vector index of templates.
        embedder: turns query texts into unit vectors.
        top_k: default number of templates a query returns (at most 8).
        confidence_threshold: default minimum confidence of a served template.
        roles: roles that learn into and are served from one library.
        value_nearness: least cosine at which a text value no condition names is read as the
            nearest one that a condition names (:mod:`cluster.experience.nearness`); None: never.
    """

    def __init__(
        self,
        db: Database,
        index: ExperienceIndex,
        embedder: Embedder,
        *,
        top_k: int,
        confidence_threshold: float,
        roles: RoleLibraries,
        value_nearness: float | None = None,
    ) -> None:
        self.db = db
        self.value_nearness = value_nearness
        self.index = index
        self.embedder = embedder
        self.top_k = top_k
        self.confidence_threshold = confidence_threshold
        self.roles = roles

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
        check_owner(owner)
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
        # SQL has the last word: the index may lag behind a confidence drop or a role edit.
        _split([t for t in templates.values() if _servable(t, served_roles, task_type)], threshold, kept, below)
        # What failed at this decision every time is known whatever the conditions and confidences.
        failing = (
            ()
            if signature is None or situation is None
            else never_worked([*kept, *below], signature, situation.available_actions)
        )
        found: list[StandIn] = []
        if situation is not None and self.value_nearness is not None:
            found = stand_ins(self.embedder, [*kept, *below], features, self.value_nearness)
            if found:
                snapshot, features = substituted(features, situation.context_snapshot, found)
                situation = situation.model_copy(update={"context_snapshot": snapshot})
        ranking = _Ranking(relevance, situation, features, signature, include_inapplicable)
        scored = ranking.rank(kept)[:k]
        missed = None
        if not scored and threshold > 0.0:
            # A situation's own decision came from SQL whatever its confidence: often enough.
            missed = _below_threshold(ranking, kept, below, threshold)
            if missed is None:
                # The search's filter left out everything under the threshold: one more, on a miss only.
                # A cheap bet found there is served as one found by its decision would be.
                _split(
                    self._under(owner, vector, limit, version, served_roles, task_type, threshold, relevance),
                    threshold,
                    kept,
                    below,
                )
                scored = ranking.rank(kept)[:k]
                missed = None if scored else _below_threshold(ranking, kept, below, threshold)
        experiences = tuple(_served(s, found) for s in scored)
        result = ExperienceQueryResult(
            experiences=experiences,
            templates=tuple(scored),
            below_threshold=missed,
            never_worked=failing,
        )
        notes = [result.never_worked_line()] if failing else []
        block = render_prompt_block([s.template for s in scored], notes=notes)
        return result.model_copy(update={"prompt_block": _with_nearness(block, experiences)})

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


def served_from(template: ExperienceTemplate, threshold: float) -> float:
    """The confidence from which ``template`` is served under ``threshold``.

    A template that prefers a call over a costlier one that works too is a cheap bet: if its call
    fails, the agent pays that call and falls back on the costlier one, which works. Following it
    pays off once its call works with a chance above cheap ÷ costly (1 / ``cost_ratio``), so it is
    served from there when that is under the threshold (a 2× gap: from 0.5).
    """
    if template.cost_ratio is None:
        return threshold
    return min(threshold, 1.0 / template.cost_ratio)


def _split(
    templates: Sequence[ExperienceTemplate],
    threshold: float,
    kept: list[ExperienceTemplate],
    below: list[ExperienceTemplate],
) -> None:
    """Add each of ``templates`` to ``kept`` when it is served under ``threshold``, else to ``below``."""
    for template in templates:
        (kept if template.confidence >= served_from(template, threshold) else below).append(template)


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
        # A template known to hold here comes before one in doubt (a feature unsent, or another rule
        # that holds avoids its tool), whatever their confidences: a cheap bet served under the
        # threshold must not lose to the rule it overrules. Ties (equal scores) go to the more
        # confident, then to the id, so answers are deterministic.
        scored.sort(
            key=lambda s: (
                s.applicable is not False,
                s.applicable is True,
                s.score,
                s.template.confidence,
                str(s.template.template_id),
            ),
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


def _with_nearness(block: str, experiences: Sequence[ServedExperience]) -> str:
    """The prompt block, each line that holds by nearness ending with it (``[focus: a ≈ b 0.81]``)."""
    if not any(e.near for e in experiences):
        return block
    lines = block.split("\n")
    for i, served in enumerate(experiences, 1):
        if served.near:
            lines[i] += f" [{served.near}]"
    return "\n".join(lines)


def _served(scored: ScoredTemplate, found: Sequence[StandIn]) -> ServedExperience:
    template = scored.template
    return ServedExperience(
        near=used_by(template, found) if scored.applicable else None,
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
