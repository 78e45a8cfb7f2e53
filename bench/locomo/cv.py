"""Cross-validated choice of the memory ranking constants on the LoCoMo development split.

Every constant of ``RankingPolicy`` that acts after the candidates are gathered (fusion weights and
``k``, the entity, temporal and session stages) is chosen on three conversations and scored on the
other two, for all ten such splits of the five; the report gives each fold's choice, its R@10 on
the held-out pair, their mean and spread, and the same for the shipped default policy. Categories
1-4, questions exactly as in ``bench.locomo.run``.

Each question's candidates are gathered once through ``MemoryService.candidates`` (the query path of
``run_query`` up to ranking) and re-ranked per policy with ``cluster.memory.ranking.rank``, the
function ``run_query`` itself calls, so a grid of hundreds of policies takes minutes, not hours.
The lexical query depends on ``entity_terms_lexical``; both settings are gathered.

    .venv/bin/python -m bench.locomo.cv [--data PATH] [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.locomo.run import DEFAULT_DATA, HEADLINE, Conversation, load, memory_writes, score
from bench.retrieval import keys_of, open_memory, policies
from cluster.memory.models import MemoryQuery
from cluster.memory.policy import RankingPolicy
from cluster.memory.ranking import Candidates, rank
from cluster.memory.service import MemoryService

GRID: dict[str, tuple[Any, ...]] = {
    "entity_terms_lexical": (True, False),
    "dense_weight": (0.4, 0.6, 0.8),
    "entity_boost": (0.0, 0.25, 0.5, 1.0),
    "when_boost": (0.0, 1.0),
    "time_boost": (1.0, 1.5, 2.0),
    "session_weight": (0.0, 0.25, 0.5),
    "expansion_weight": (0.0, 0.2, 0.4, 0.6),
}

#: Stages whose constants were chosen on LongMemEval, not in this grid: each is also shown off.
LATER_STAGES: dict[str, dict[str, Any]] = {
    "role stage": {"role_boost": 0.0},
    "recency stage": {"recency_boost": 0.0},
    "coverage stage": {"coverage_decay": 1.0},
    "loose relative times": {"time_slack": 0.0},
    "all four": {"role_boost": 0.0, "recency_boost": 0.0, "coverage_decay": 1.0, "time_slack": 0.0},
}


@dataclass
class Gathered:
    """One question's candidates under one lexical-query setting, with what scores them."""

    conversation: str
    category: int
    gold: list[str]
    candidates: Candidates
    keys: dict[int, str]


def gather(service: MemoryService, conversations: list[Conversation]) -> list[Gathered]:
    out = []
    for conv in conversations:
        keys = keys_of(service, conv.sample_id)
        for question in conv.questions:
            if question.category not in HEADLINE:
                continue
            found = service.candidates(conv.sample_id, MemoryQuery(query=question.question, top_k=10))
            out.append(Gathered(conv.sample_id, question.category, question.gold, found, keys))
    return out


def recall_at_10(item: Gathered, policy: RankingPolicy) -> float:
    ranked = rank(item.candidates, policy, 10).top
    return score([item.keys[r.seq] for r in ranked], item.gold)[1]


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--json", type=Path, default=None, help="also write the per-fold figures here")
    parser.add_argument("--fp32", action="store_true", help="run the embedding model in fp32, not int8")
    args = parser.parse_args()
    conversations = load(args.data)
    started = time.perf_counter()
    with open_memory("locomo", fp32=args.fp32) as memory:
        for conv in conversations:
            memory.service.apply_writes(conv.sample_id, memory_writes(conv))
        gathered = {}
        for keep in GRID["entity_terms_lexical"]:
            gathered[keep] = gather(memory.variant(RankingPolicy(entity_terms_lexical=keep)), conversations)
    print(f"gathered candidates in {time.perf_counter() - started:.0f} s")

    # scores[policy index][question index]
    grid = list(policies(GRID))
    scores = [[recall_at_10(item, p) for item in gathered[p.entity_terms_lexical]] for p in grid]
    # The previous default: fusion alone, names kept in the lexical query.
    default = RankingPolicy(
        entity_terms_lexical=True,
        dense_weight=0.4,
        entity_boost=0,
        when_boost=0,
        time_boost=0,
        session_weight=0,
        expansion_weight=0,
        role_boost=0,
        recency_boost=0,
        coverage_decay=1,
        time_slack=0,
    )
    default_scores = [recall_at_10(item, default) for item in gathered[default.entity_terms_lexical]]
    shipped = RankingPolicy()
    shipped_scores = [recall_at_10(item, shipped) for item in gathered[shipped.entity_terms_lexical]]
    items = gathered[True]
    names = [c.sample_id for c in conversations]
    folds: list[dict[str, Any]] = []
    for train in itertools.combinations(names, 3):
        test = [n for n in names if n not in train]
        on_train = [i for i, it in enumerate(items) if it.conversation in train]
        on_test = [i for i, it in enumerate(items) if it.conversation in test]
        best = max(range(len(grid)), key=lambda p: (mean([scores[p][i] for i in on_train]), -p))
        folds.append(
            {
                "train": list(train),
                "test": test,
                "chosen": _changed(grid[best]),
                "train_R@10": mean([scores[best][i] for i in on_train]),
                "test_R@10": mean([scores[best][i] for i in on_test]),
                "default_test_R@10": mean([default_scores[i] for i in on_test]),
                "shipped_test_R@10": mean([shipped_scores[i] for i in on_test]),
            }
        )
    best_all = max(range(len(grid)), key=lambda p: (mean(scores[p]), -p))
    print(f"{len(grid)} policies, {len(items)} questions (categories 1-4)")
    print("| fold | tuned on | held out | chosen | R@10 tuned-on | R@10 held-out | fusion only | shipped default |")
    print("|---|---|---|---|---|---|---|---|")
    for k, f in enumerate(folds, start=1):
        print(
            f"| {k} | {', '.join(f['train'])} | {', '.join(f['test'])} | {_short(f['chosen'])} "
            f"| {f['train_R@10']:.3f} | {f['test_R@10']:.3f} | {f['default_test_R@10']:.3f} "
            f"| {f['shipped_test_R@10']:.3f} |"
        )
    held = [float(f["test_R@10"]) for f in folds]
    base = [float(f["default_test_R@10"]) for f in folds]
    print(
        f"held-out R@10: mean {mean(held):.3f}, sd {statistics.stdev(held):.3f}, range {min(held):.3f}-{max(held):.3f}"
    )
    print(f"fusion only (previous default), held-out R@10: mean {mean(base):.3f}, sd {statistics.stdev(base):.3f}")
    print(f"best on all five: {_short(_changed(grid[best_all]))} R@10 {mean(scores[best_all]):.3f}")
    print(f"fusion only on all five: R@10 {mean(default_scores):.3f}; shipped default: {mean(shipped_scores):.3f}")
    # The stages chosen on LongMemEval (bench.longmemeval.cv), each off in turn, on all five.
    for name, off in LATER_STAGES.items():
        policy = shipped.model_copy(update=off)
        scored = [recall_at_10(item, policy) for item in gathered[policy.entity_terms_lexical]]
        print(f"shipped default, {name} off: R@10 {mean(scored):.3f}")
    if args.json:
        args.json.write_text(json.dumps({"folds": folds, "best_all": _changed(grid[best_all])}, indent=2))


def _changed(policy: RankingPolicy) -> dict[str, Any]:
    """The grid's constants of a policy (all of them: a fold's choice reads in full)."""
    return {name: getattr(policy, name) for name in GRID}


def _short(chosen: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in chosen.items())


if __name__ == "__main__":
    main()
