"""``hindsight evaluate``: load owners' stored trajectories from SQL and run the pure offline evaluation.

The evaluation itself is :mod:`pipelines.evaluate` (pure); this module is its adapter: it reads
trajectories through :class:`~cluster.trajectories.repository.SqlTrajectoryStore`, counts prompt
tokens with the embedder's own tokenizer, and lays the reports out as a table. No Ray, no Milvus:
the library is rebuilt in memory from the training trajectories.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from actors.engine.model.trajectories import Trajectory
from cluster.analysis import load_scorer
from cluster.embedding.onnx_minilm import TOKENIZER_PATH
from cluster.experience.roles import pooled_roles
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.trajectories.repository import SqlTrajectoryStore
from pipelines.evaluate import EvalConfig, EvaluationReport, Metrics, TokenCounter, evaluate

logger = logging.getLogger(__name__)

TOKENIZER_NAME = "all-MiniLM-L6-v2 tokenizer.json"


def minilm_token_counter(path: Path = TOKENIZER_PATH) -> TokenCounter:
    """Tokens as the embedder counts them (WordPiece of all-MiniLM-L6-v2), without special tokens
    and without the embedder's 256-token truncation: a prompt block is measured whole."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count


def load_trajectories(settings: Settings, owner: str | None = None) -> dict[str, list[Trajectory]]:
    """Finalized trajectories by owner (one owner's, or every owner's), in one read transaction, each
    under its library's role (the ``shared_roles`` setting), as the learners read them."""
    roles = settings.role_libraries()
    db = Database(settings.sql_url())
    try:
        with db.read() as session:
            store = SqlTrajectoryStore(session)
            by_owner: dict[str, list[Trajectory]] = {}
            for (group_owner, _role, _task_type), ids in store.finalized_groups(owner).items():
                by_owner.setdefault(group_owner, []).extend(pooled_roles(store.load_many(group_owner, ids), roles))
    finally:
        db.dispose()
    return dict(sorted(by_owner.items()))


def run_evaluation(
    settings: Settings,
    scorers: Sequence[str],
    *,
    owner: str | None = None,
    holdout: float = 0.2,
    top_k: int | None = None,
    min_confidence: float | None = None,
    scorer_modules: Sequence[str] = (),
    keep_decisions: bool = False,
) -> list[EvaluationReport]:
    """Evaluate every scorer on every owner (or one owner); one report per (owner, scorer).

    ``top_k`` and ``min_confidence`` default to the service's ``experience_top_k`` and
    ``confidence_threshold``; the batch size to ``analysis_batch_size``.

    Raises:
        InvalidInput: an unknown scorer, or a scorer module that cannot be imported.
        pydantic.ValidationError: a parameter out of range.
    """
    for scorer in scorers:
        load_scorer(scorer, scorer_modules)  # a user's scorer registers itself on import
    count = minilm_token_counter()
    reports = []
    for name, trajectories in load_trajectories(settings, owner).items():
        for scorer in scorers:
            config = EvalConfig(
                scorer=scorer,
                holdout=holdout,
                top_k=settings.experience_top_k if top_k is None else top_k,
                min_confidence=settings.confidence_threshold if min_confidence is None else min_confidence,
                batch_size=settings.analysis_batch_size,
            )
            report = evaluate(
                trajectories, config, count_tokens=count, token_counter=TOKENIZER_NAME, keep_decisions=keep_decisions
            )
            logger.info(
                "evaluated %s with %s: %d train, %d test, %d decisions",
                name,
                scorer,
                report.train_trajectories,
                report.test_trajectories,
                report.overall.decisions,
            )
            reports.append(report)
    return reports


def write_json(reports: Sequence[EvaluationReport], path: Path) -> None:
    """The reports as one JSON document: ``{"reports": [...]}``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"reports": [r.model_dump(mode="json") for r in reports]}
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _row(table: Table, owner: str, scorer: str, group: str, m: Metrics, *, bold: bool = False) -> None:
    cells = [
        owner,
        scorer,
        group,
        str(m.decisions),
        f"{_rate(m.hit_at_1)}",
        f"{_rate(m.hit_at_k)}",
        f"{_rate(m.avoid_precision)} ({m.avoid_correct}/{m.avoid_judged})",
        _rate(m.coverage),
        "–" if m.tokens_per_decision is None else f"{m.tokens_per_decision:.0f}",
    ]
    table.add_row(*(f"[bold]{c}[/bold]" if bold else c for c in cells))


def evaluation_table(reports: Sequence[EvaluationReport], *, groups: bool = True) -> Table:
    """One row per (owner, scorer) overall, then, with ``groups``, one per role and task type."""
    k = reports[0].config.top_k if reports else 5
    table = Table(title="offline evaluation on held-out trajectories", show_lines=False)
    # In a narrow terminal the group captions wrap; names, numbers and the short headers never do.
    for column in ("owner", "scorer", "role/task type", "decisions", "hit@1", f"hit@{k}"):
        table.add_column(
            column,
            justify="right" if column in ("decisions", "hit@1", f"hit@{k}") else "left",
            no_wrap=column != "role/task type",
        )
    for column in ("avoid precision", "coverage", "tokens/decision"):
        table.add_column(column, justify="right")
    for report in reports:
        caption = (
            f"all ({report.train_trajectories} train / {report.test_trajectories} test, {report.servable} servable)"
        )
        _row(table, report.owner, report.config.scorer, caption, report.overall, bold=True)
        if groups:
            for g in report.by_group:
                _row(table, "", "", f"{g.role}/{g.task_type or '*'}", g.metrics)
    return table
