"""LongMemEval-S retrieval benchmark through the long-term memory API.

Follows ``../shared/bench/longmemeval/README.md``: every turn of a question's haystack is one memory
(key = ``<session id>:<turn number>``, value = the turn's content, metadata = session id, the
session's date, the speaker ``user`` / ``assistant``), one owner per question; the query is the bare
question, top 10, asked at the question's own date (``MemoryQuery.now``). Prints, overall and per
question type: turn R@5 / R@10 (evidence = turns with ``has_answer``), session recall ``S_any@10`` /
``S_all@10`` and the query's latency (the first query of each owner, right after its writes), for the
memory service, each ablation, and baselines over the same turns in the same run: BM25 (rank_bm25),
dense-only (the same MiniLM vectors, cosine) and their reciprocal-rank fusion (k=60).

    .venv/bin/python -m bench.longmemeval.run [--quick | --per-type N] [--vectors PATH] [--json OUT]

``--quick`` takes the first 4 questions of each type (24 of 96). ``--vectors`` keeps the turns'
vectors (the same model's) in a file between runs: the first run embeds ~45k turns (long ones),
later runs none; queries are always embedded by the model, timed. The data set is read from
outside the repository; never copy it in. Never tune on LongMemEval questions outside that file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.retrieval import (
    Corpus,
    Ranker,
    StoredVectors,
    bm25_ranker,
    dense_ranker,
    memory_ranker,
    open_memory,
    rrf_ranker,
)
from cluster.embedding import OnnxMiniLMEmbedder
from cluster.memory.entities import embedded_text
from cluster.memory.models import MemoryWrite
from cluster.memory.policy import MemoryLimits, RankingPolicy
from cluster.memory.service import MemoryService

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "bench" / "longmemeval" / "longmemeval_s_dev.json.gz"
TYPES = (
    "knowledge-update",
    "multi-session",
    "temporal-reasoning",
    "single-session-preference",
    "single-session-user",
    "single-session-assistant",
)
QUICK_PER_TYPE = 4
#: Each ranking stage off in turn (RankingPolicy constants), to show what it adds.
ABLATIONS: dict[str, dict[str, Any]] = {
    "memory, no query expansion": {"expansion_weight": 0.0},
    "memory, no entity stage": {"entity_boost": 0.0, "entity_terms_lexical": True},
    "memory, no temporal stage": {"time_boost": 0.0, "when_boost": 0.0},
    "memory, no session evidence": {"session_weight": 0.0},
    "memory, no role stage": {"role_boost": 0.0},
    "memory, no recency stage": {"recency_boost": 0.0},
    "memory, no coverage stage": {"coverage_decay": 1.0},
    "memory, relative times read exactly": {"time_slack": 0.0},
    "memory, none of these four (the previous default)": {
        "role_boost": 0.0,
        "recency_boost": 0.0,
        "coverage_decay": 1.0,
        "time_slack": 0.0,
    },
}


@dataclass
class Turn:
    dia_id: str
    session: str
    date: str
    role: str
    content: str
    evidence: bool

    @property
    def item_text(self) -> str:
        return self.content


@dataclass
class Question:
    question: str
    kind: str
    date: str
    gold: list[str]
    answer_sessions: list[str]


@dataclass
class Haystack:
    """One question and its own haystack: one owner."""

    sample_id: str
    turns: list[Turn]
    questions: list[Question] = field(default_factory=list)

    @property
    def question(self) -> Question:
        return self.questions[0]


def load(path: Path, per_type: int | None = None) -> list[Haystack]:
    """The questions (the first ``per_type`` of each type, or all), each with its haystack's turns."""
    taken: dict[str, int] = defaultdict(int)
    out = []
    for item in json.loads(gzip.open(path).read()):
        kind = item["question_type"]
        if per_type is not None and taken[kind] >= per_type:
            continue
        taken[kind] += 1
        turns = []
        sessions = zip(item["haystack_session_ids"], item["haystack_dates"], item["haystack_sessions"], strict=True)
        for session, date, said in sessions:
            for i, turn in enumerate(said):
                turns.append(
                    Turn(f"{session}:{i}", session, date, turn["role"], turn["content"], bool(turn.get("has_answer")))
                )
        question = Question(
            question=item["question"],
            kind=kind,
            date=item["question_date"],
            gold=[t.dia_id for t in turns if t.evidence],
            answer_sessions=list(item["answer_session_ids"]),
        )
        out.append(Haystack(item["question_id"], turns, [question]))
    return out


def moment(date: str) -> datetime:
    """A LongMemEval date ("2023/05/24 (Wed) 02:54") as a time, read as UTC."""
    return datetime.strptime(date.split(" (")[0] + date.split(")")[1], "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def memory_writes(haystack: Haystack) -> list[MemoryWrite]:
    """The turns as the README writes them: the content, with session id, date and speaker in metadata."""
    return [
        MemoryWrite(
            key=turn.dia_id,
            value=turn.content,
            metadata={"session_id": turn.session, "date": turn.date, "speaker": turn.role},
            source_ids=(turn.dia_id,),
        )
        for turn in haystack.turns
    ]


def ingest(service: MemoryService, haystacks: Sequence[Haystack]) -> None:
    """Every question's haystack written under its own owner, one batch each."""
    for haystack in haystacks:
        service.apply_writes(haystack.sample_id, memory_writes(haystack))


#: A few assistant turns run past the default 16 KiB a value (up to ~42k characters): raised, as a
#: deployment storing whole chat turns sets HINDSIGHT_MEMORY__MAX_VALUE_BYTES.
LIMITS = MemoryLimits(max_value_bytes=1 << 17)


def asked_at(corpus: Corpus, qi: int) -> datetime:
    """The question's own date: the time its relative phrases are read against."""
    assert isinstance(corpus, Haystack)
    return moment(corpus.questions[qi].date)


# ------------------------------------------------------------------------------------------ scoring

METRICS = ("R@5", "R@10", "S_any@10", "S_all@10")


def score(ranked: Sequence[str], question: Question) -> tuple[float, float, float, float]:
    top10 = list(ranked[:10])
    gold = set(question.gold)
    r5 = len(gold & set(top10[:5])) / len(gold)
    r10 = len(gold & set(top10)) / len(gold)
    sessions = {d.rsplit(":", 1)[0] for d in top10}
    wanted = set(question.answer_sessions)
    return r5, r10, float(bool(wanted & sessions)), float(wanted <= sessions)


@dataclass
class Result:
    """Per question: its type, its four figures, its query's milliseconds."""

    rows: list[tuple[str, tuple[float, float, float, float], float]] = field(default_factory=list)

    def mean(self, metric: str, kinds: Sequence[str] | None = None, ids: set[int] | None = None) -> float:
        m = METRICS.index(metric)
        values = [
            r[1][m] for i, r in enumerate(self.rows) if (kinds is None or r[0] in kinds) and (ids is None or i in ids)
        ]
        return sum(values) / len(values) if values else 0.0

    def latency(self, kind: str | None = None) -> tuple[float, float]:
        ms = sorted(r[2] for r in self.rows if kind is None or r[0] == kind)
        if not ms:
            return 0.0, 0.0
        return statistics.median(ms), ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]


def evaluate(haystacks: Sequence[Haystack], ranker: Ranker) -> Result:
    result = Result()
    for haystack in haystacks:
        started = time.perf_counter()
        ranked = ranker(haystack, 0)
        ms = (time.perf_counter() - started) * 1000
        result.rows.append((haystack.question.kind, score(ranked, haystack.question), ms))
    return result


# -------------------------------------------------------------------------------------------- print


def table(results: dict[str, Result]) -> str:
    lines = [
        "| method | R@5 | R@10 | S_any@10 | S_all@10 | first query ms p50 / p95 |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        p50, p95 = r.latency()
        cells = " | ".join(f"{r.mean(m):.3f}" for m in METRICS)
        timed = f"{p50:.0f} / {p95:.0f}" if p95 > 0 else "(re-ranked)"
        lines.append(f"| {name} | {cells} | {timed} |")
    return "\n".join(lines)


def type_table(results: dict[str, Result], metric: str, kinds: Sequence[str]) -> str:
    first = next(iter(results.values()))
    counts = {k: sum(1 for r in first.rows if r[0] == k) for k in kinds}
    head = " | ".join(f"{k} (n={counts[k]})" for k in kinds)
    lines = [f"| {metric} by type | {head} |", "|---" * (len(kinds) + 1) + "|"]
    for name, r in results.items():
        lines.append(f"| {name} | " + " | ".join(f"{r.mean(metric, [k]):.3f}" for k in kinds) + " |")
    return "\n".join(lines)


def latency_table(result: Result, kinds: Sequence[str]) -> str:
    lines = ["| question type | first query ms p50 | p95 |", "|---|---|---|"]
    for kind in [*kinds, None]:
        p50, p95 = result.latency(kind)
        lines.append(f"| {kind or 'all'} | {p50:.0f} | {p95:.0f} |")
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK_PER_TYPE} questions of each type")
    parser.add_argument("--per-type", type=int, default=None, help="the first N questions of each type")
    parser.add_argument("--vectors", type=Path, default=None, help="keep the turns' vectors in this .npz file")
    parser.add_argument("--json", type=Path, default=None, help="also write the per-question figures here")
    parser.add_argument(
        "--cv", action="store_true", help="also cross-validate the ranking constants (bench.longmemeval.cv)"
    )
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep the stores here; a later run with the same questions reuses them"
    )
    parser.add_argument("--fp32", action="store_true", help="run the embedding model in fp32, not int8")
    args = parser.parse_args()
    # The cross-validation reads this module's data and scoring: imported here, not at the top.
    from bench.longmemeval.cv import cross_validate, gather, reranked

    per_type = QUICK_PER_TYPE if args.quick else args.per_type
    haystacks = load(args.data, per_type)
    kinds = [k for k in TYPES if any(h.question.kind == k for h in haystacks)]
    model = OnnxMiniLMEmbedder(threads=1, quantized=not args.fp32)
    model.embed(["warm up"])
    stored = StoredVectors(model, args.vectors)
    with open_memory("longmemeval", embedder=stored, keep=args.keep, limits=LIMITS) as memory:
        started = time.perf_counter()
        if not memory.reused:
            ingest(memory.service, haystacks)
        ingest_s = time.perf_counter() - started
        embedded = stored.added
        stored.save()

        results: dict[str, Result] = {}
        # The first query of each owner, right after its writes, through the service that wrote them.
        results["memory (hybrid)"] = evaluate(haystacks, memory_ranker(memory.service, now=asked_at))
        # Asked without its own time: relative phrases are read against the clock's today.
        results["memory, no question time (now)"] = evaluate(haystacks, memory_ranker(memory.service))
        bm25 = bm25_ranker(haystacks)
        # The turns' vectors as the memory holds them (the speaker said), so the baseline reads the same ones.
        dense = dense_ranker(haystacks, stored, lambda t: embedded_text(t.item_text, {"speaker": t.role}))
        stored.save()
        results["baseline BM25 (rank_bm25)"] = evaluate(haystacks, bm25)
        results["baseline dense MiniLM"] = evaluate(haystacks, dense)
        results["baseline RRF(BM25, dense)"] = evaluate(haystacks, rrf_ranker(bm25, dense))
        # Each question's candidates once: the ablations and the cross-validation rank them again
        # under other policies with the function run_query calls (ms per question, not a query).
        gathered = gather(memory.service, haystacks)
        for name, policy in variants().items():
            results[name] = reranked(gathered, policy)

    n_turns = sum(len(h.turns) for h in haystacks)
    print(f"LongMemEval-S {args.data.name}: {len(haystacks)} questions, {n_turns} turns")
    if memory.reused:
        print(f"the writes of an earlier run, kept in {args.keep}")
    else:
        print(
            f"ingest through MemoryService.apply_writes: {ingest_s:.1f} s ({n_turns / ingest_s:.0f} turns/s; "
            f"{embedded} texts embedded, the rest from {args.vectors})"
        )
    print()
    print(table(results))
    for metric in ("R@10", "S_all@10"):
        print()
        print(type_table(results, metric, kinds))
    print()
    print("memory (hybrid), the first query of each owner, right after its writes:")
    print(latency_table(results["memory (hybrid)"], kinds))
    if args.json:
        args.json.write_text(json.dumps({name: r.rows for name, r in results.items()}, indent=2))
    if args.cv:
        print()
        cross_validate(gathered, args.folds)


def variants() -> dict[str, RankingPolicy]:
    return {name: RankingPolicy(**change) for name, change in ABLATIONS.items()}


if __name__ == "__main__":
    main()
