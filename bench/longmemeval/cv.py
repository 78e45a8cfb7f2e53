"""Cross-validated choice of the memory ranking constants on the LongMemEval-S development split.

The questions of each type are dealt into ``--folds`` parts (question 1 to part 1, question 2 to
part 2, ...); for every fold, the grid's policy with the best turn R@10 on the other parts is chosen
and scored on that part. The report gives each fold's choice, its R@10 and S_all@10 held out, their
mean and spread, the shipped default's on the same parts, and R@10 per type held out (every question
is held out exactly once). Questions, writes and queries exactly as in ``bench.longmemeval.run``.

Each question's candidates are gathered once through ``MemoryService.candidates`` and re-ranked per
policy with ``cluster.memory.ranking.rank`` (what ``run_query`` calls), as ``bench.locomo.cv`` does.

    .venv/bin/python -m bench.longmemeval.cv [--quick] [--vectors PATH] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.longmemeval.run import (
    DEFAULT_DATA,
    LIMITS,
    QUICK_PER_TYPE,
    TYPES,
    Haystack,
    Question,
    Result,
    ingest,
    load,
    moment,
    score,
)
from bench.retrieval import StoredVectors, keys_of, open_memory, policies
from cluster.embedding import OnnxMiniLMEmbedder
from cluster.memory.models import MemoryQuery
from cluster.memory.policy import RankingPolicy
from cluster.memory.ranking import Candidates, rank
from cluster.memory.service import MemoryService

#: The constants chosen per fold: the stages this benchmark added, and the fusion and session
#: constants they interact with.
GRID: dict[str, tuple[Any, ...]] = {
    "dense_weight": (0.6, 1.0),
    "session_weight": (0.0, 0.25, 0.5),
    "recency_boost": (0.0, 0.25, 0.5),
    "coverage_decay": (1.0, 0.8, 0.6, 0.4),
    "time_slack": (0.0, 0.25),
    "role_boost": (0.0, 0.5, 1.0),
}


@dataclass
class Gathered:
    question: Question
    candidates: Candidates
    keys: dict[int, str]


def gather(reader: MemoryService, haystacks: list[Haystack]) -> list[Gathered]:
    """Each question's candidates (its haystack already written), asked at the question's time."""
    out = []
    for haystack in haystacks:
        question = haystack.question
        request = MemoryQuery(query=question.question, top_k=10, now=moment(question.date))
        found = reader.candidates(haystack.sample_id, request)
        out.append(Gathered(question, found, keys_of(reader, haystack.sample_id)))
    return out


def figures(item: Gathered, policy: RankingPolicy) -> tuple[float, float, float, float]:
    ranked = rank(item.candidates, policy, 10).top
    return score([item.keys[r.seq] for r in ranked], item.question)


def reranked(items: list[Gathered], policy: RankingPolicy) -> Result:
    """The questions' figures under ``policy`` (no latency: nothing is queried)."""
    return Result([(item.question.kind, figures(item, policy), 0.0) for item in items])


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK_PER_TYPE} questions of each type")
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--vectors", type=Path, default=None, help="keep the turns' vectors in this .npz file")
    parser.add_argument("--json", type=Path, default=None, help="also write the per-fold figures here")
    parser.add_argument("--keep", type=Path, default=None, help="the stores of a run of bench.longmemeval.run --keep")
    args = parser.parse_args()
    haystacks = load(args.data, QUICK_PER_TYPE if args.quick else None)
    started = time.perf_counter()
    model = OnnxMiniLMEmbedder(threads=1)
    stored = StoredVectors(model, args.vectors)
    with open_memory("longmemeval", embedder=stored, keep=args.keep, limits=LIMITS) as memory:
        if not memory.reused:
            ingest(memory.service, haystacks)
        stored.save()
        items = gather(memory.service, haystacks)
    print(f"gathered candidates in {time.perf_counter() - started:.0f} s")
    folds = cross_validate(items, args.folds)
    if args.json:
        args.json.write_text(json.dumps({"folds": folds}, indent=2))


def cross_validate(items: list[Gathered], n_folds: int) -> list[dict[str, Any]]:
    """Choose on all parts but one, report on that one, for every part; print the tables."""
    grid = list(policies(GRID))
    # figures[policy index][question index]: R@5, R@10, S_any@10, S_all@10
    table = [[figures(item, p) for item in items] for p in grid]
    shipped = [figures(item, RankingPolicy()) for item in items]
    fold_of: list[int] = []
    dealt: dict[str, int] = {}
    for item in items:
        kind = item.question.kind
        fold_of.append(dealt.get(kind, 0) % n_folds)
        dealt[kind] = dealt.get(kind, 0) + 1
    folds: list[dict[str, Any]] = []
    held_out: dict[int, tuple[float, float, float, float]] = {}
    for fold in range(n_folds):
        train = [i for i, f in enumerate(fold_of) if f != fold]
        test = [i for i, f in enumerate(fold_of) if f == fold]
        best = max(range(len(grid)), key=lambda p: (mean([table[p][i][1] for i in train]), -p))
        held_out.update((i, table[best][i]) for i in test)
        folds.append(
            {
                "fold": fold + 1,
                "questions": len(test),
                "chosen": {name: getattr(grid[best], name) for name in GRID},
                "train_R@10": mean([table[best][i][1] for i in train]),
                "test_R@10": mean([table[best][i][1] for i in test]),
                "test_S_all@10": mean([table[best][i][3] for i in test]),
                "shipped_test_R@10": mean([shipped[i][1] for i in test]),
            }
        )
    print(f"{len(grid)} policies, {len(items)} questions, {n_folds} folds (each type dealt over the folds)")
    print("| fold | held out | chosen | R@10 tuned-on | R@10 held-out | S_all@10 held-out | shipped default |")
    print("|---|---|---|---|---|---|---|")
    for f in folds:
        chosen = ", ".join(f"{k}={v}" for k, v in f["chosen"].items())
        print(
            f"| {f['fold']} | {f['questions']} | {chosen} | {f['train_R@10']:.3f} | {f['test_R@10']:.3f} "
            f"| {f['test_S_all@10']:.3f} | {f['shipped_test_R@10']:.3f} |"
        )
    held = [float(f["test_R@10"]) for f in folds]
    print(
        f"held-out R@10: mean {mean(held):.3f}, sd {statistics.stdev(held):.3f}, range {min(held):.3f}-{max(held):.3f}"
    )
    print(
        f"every question held out once: R@10 {mean([v[1] for v in held_out.values()]):.3f}, "
        f"S_all@10 {mean([v[3] for v in held_out.values()]):.3f}; "
        f"shipped default R@10 {mean([v[1] for v in shipped]):.3f}, S_all@10 {mean([v[3] for v in shipped]):.3f}"
    )
    print("| type | R@10 held-out | shipped default |")
    print("|---|---|---|")
    for kind in TYPES:
        ids = [i for i, item in enumerate(items) if item.question.kind == kind]
        if ids:
            print(f"| {kind} | {mean([held_out[i][1] for i in ids]):.3f} | {mean([shipped[i][1] for i in ids]):.3f} |")
    best_all = max(range(len(grid)), key=lambda p: (mean([v[1] for v in table[p]]), -p))
    print(
        "best on all: "
        + ", ".join(f"{k}={getattr(grid[best_all], k)}" for k in GRID)
        + f" R@10 {mean([v[1] for v in table[best_all]]):.3f}"
    )
    return folds


if __name__ == "__main__":
    main()
