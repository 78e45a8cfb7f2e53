"""LoCoMo retrieval benchmark through the long-term memory API.

Follows ``../shared/bench/locomo/README.md``: every dialog turn is one memory (id = ``dia_id``, text =
``speaker: text``, metadata = session number, session date, speaker), one owner per conversation;
every question is a query within its own conversation; the top 10 memory ids are scored against the
normalised evidence. Prints R@5, R@10, SessR@10 and MRR@10 over categories 1-4 and per category
(5, adversarial, apart), for the memory service and for baselines computed in the same run:
BM25 (rank_bm25, ``\\w+`` lower-case tokens), dense-only (the same MiniLM vectors, cosine) and their
reciprocal-rank fusion (k=60).

    .venv/bin/python -m bench.locomo.run [--data PATH] [--database-url URL] [--json OUT]

The data set is CC BY-NC 4.0 and is read from outside the repository; never copy it in.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.retrieval import Ranker, bm25_ranker, dense_ranker, memory_ranker, open_memory, rrf_ranker
from cluster.memory.models import MemoryWrite
from cluster.memory.policy import RankingPolicy

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "bench" / "locomo" / "locomo10_dev.json"
HEADLINE = (1, 2, 3, 4)
FUSION_ONLY: dict[str, Any] = {
    "entity_boost": 0.0,
    "entity_terms_lexical": True,
    "time_boost": 0.0,
    "when_boost": 0.0,
    "session_weight": 0.0,
    "expansion_weight": 0.0,
    "role_boost": 0.0,
    "recency_boost": 0.0,
    "coverage_decay": 1.0,
    "time_slack": 0.0,
}
ABLATIONS: dict[str, dict[str, Any]] = {
    "memory, no query expansion": {"expansion_weight": 0.0},
    "memory, no entity stage": {"entity_boost": 0.0, "entity_terms_lexical": True},
    "memory, entity boost only (names kept in the lexical query)": {"entity_terms_lexical": True},
    "memory, no temporal stage": {"time_boost": 0.0, "when_boost": 0.0},
    "memory, no session evidence": {"session_weight": 0.0},
    "memory, no role stage": {"role_boost": 0.0},
    "memory, no recency stage": {"recency_boost": 0.0},
    "memory, no coverage stage": {"coverage_decay": 1.0},
    "memory, fusion only (dense 0.6)": FUSION_ONLY,
    "memory, fusion only (previous default)": {**FUSION_ONLY, "dense_weight": 0.4},
    "memory, lexical stage only": {**FUSION_ONLY, "dense_weight": 0.0},
    "memory, dense stage only": {**FUSION_ONLY, "lexical_weight": 0.0},
}
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@dataclass
class Turn:
    dia_id: str
    session: int
    date_time: str
    speaker: str
    text: str

    @property
    def item_text(self) -> str:
        return f"{self.speaker}: {self.text}"


@dataclass
class Question:
    question: str
    category: int
    gold: list[str]


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question] = field(default_factory=list)


def normalise_evidence(evidence: Sequence[str], known: set[str]) -> list[str]:
    """Split ``"D8:6; D9:17"``, fix ``D:11:26`` and ``D30:05``, drop unknown ids, de-duplicate."""
    out: list[str] = []
    for entry in evidence:
        for part in re.split(r"[;,\s]+", str(entry)):
            match = re.fullmatch(r"D:?(\d+):0*(\d+)", part.strip())
            if match is None:
                continue
            dia_id = f"D{int(match.group(1))}:{int(match.group(2))}"
            if dia_id in known and dia_id not in out:
                out.append(dia_id)
    return out


def load(path: Path) -> list[Conversation]:
    conversations = []
    for sample in json.loads(path.read_text()):
        conv = sample["conversation"]
        turns = []
        for name, value in conv.items():
            match = re.fullmatch(r"session_(\d+)", name)
            if match is None or not isinstance(value, list):
                continue
            for turn in value:
                turns.append(
                    Turn(
                        dia_id=turn["dia_id"],
                        session=int(match.group(1)),
                        date_time=conv.get(f"{name}_date_time", ""),
                        speaker=turn["speaker"],
                        text=turn["text"],
                    )
                )
        turns.sort(key=lambda t: (t.session, int(t.dia_id.split(":")[1])))
        known = {t.dia_id for t in turns}
        questions = []
        for qa in sample["qa"]:
            gold = normalise_evidence(qa.get("evidence") or [], known)
            if gold:
                questions.append(Question(question=qa["question"], category=int(qa["category"]), gold=gold))
        conversations.append(Conversation(sample_id=sample["sample_id"], turns=turns, questions=questions))
    return conversations


#: The metadata keys as this benchmark names them, and as another writer might (another style).
KEYS = ("session", "session_date_time", "speaker")
STYLED_KEYS = ("Session_No", "sessionDateTime", "Speaker")


def unix_time(date_time: str) -> int:
    """A LoCoMo session time ("1:56 pm on 8 May, 2023") as a Unix time in seconds, read as UTC."""
    return int(datetime.strptime(date_time, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC).timestamp())


def memory_writes(
    conv: Conversation,
    *,
    with_context: bool = True,
    keys: tuple[str, str, str] = KEYS,
    speaker_in_value: bool = True,
    unix_times: bool = False,
) -> list[MemoryWrite]:
    """The turns as any writer sends them: no context, so the service searches each with the turns
    told beside it in its session (``with_context=False`` sends an empty context: none at all).
    ``keys`` name the session number, the session's date and the speaker in the metadata;
    ``speaker_in_value=False`` leaves the speaker out of the value (metadata alone names them);
    ``unix_times`` sends the session's date as a Unix time (a number), as many programs log time."""
    session, date_time, speaker = keys
    return [
        MemoryWrite(
            key=turn.dia_id,
            value=turn.item_text if speaker_in_value else turn.text,
            metadata={
                session: turn.session,
                date_time: unix_time(turn.date_time) if unix_times else turn.date_time,
                speaker: turn.speaker,
            },
            context=None if with_context else "",
            source_ids=(turn.dia_id,),
        )
        for turn in conv.turns
    ]


def json_writes(conv: Conversation) -> list[MemoryWrite]:
    """The turns as a writer that sends each one as a JSON object value, with no metadata."""
    return [
        MemoryWrite(
            key=turn.dia_id,
            value={"speaker": turn.speaker, "text": turn.text, "session": turn.session, "date": turn.date_time},
            source_ids=(turn.dia_id,),
        )
        for turn in conv.turns
    ]


# ------------------------------------------------------------------------------------------ scoring


def score(ranked: Sequence[str], gold: Sequence[str]) -> tuple[float, float, float, float]:
    top10 = list(ranked[:10])
    gold_set = set(gold)
    r5 = len(gold_set & set(top10[:5])) / len(gold_set)
    r10 = len(gold_set & set(top10)) / len(gold_set)
    sessions = {d.split(":")[0] for d in top10}
    sess = sum(1 for g in gold_set if g.split(":")[0] in sessions) / len(gold_set)
    mrr = next((1.0 / (k + 1) for k, d in enumerate(top10) if d in gold_set), 0.0)
    return r5, r10, sess, mrr


def evaluate(conversations: list[Conversation], ranker: Ranker) -> dict[str, Any]:
    per_cat: dict[int, list[tuple[float, float, float, float]]] = defaultdict(list)
    started = time.perf_counter()
    count = 0
    for conv in conversations:
        for qi, question in enumerate(conv.questions):
            per_cat[question.category].append(score(ranker(conv, qi), question.gold))
            count += 1
    elapsed = time.perf_counter() - started
    headline = [row for cat in HEADLINE for row in per_cat[cat]]
    return {
        "overall": _mean(headline),
        "n": len(headline),
        "categories": {cat: {"n": len(rows), **_mean(rows)} for cat, rows in sorted(per_cat.items())},
        "ms_per_query": 1000 * elapsed / max(count, 1),
    }


def _mean(rows: list[tuple[float, float, float, float]]) -> dict[str, float]:
    if not rows:
        return {"R@5": 0.0, "R@10": 0.0, "SessR@10": 0.0, "MRR@10": 0.0}
    m = np.mean(np.array(rows), axis=0)
    return {"R@5": float(m[0]), "R@10": float(m[1]), "SessR@10": float(m[2]), "MRR@10": float(m[3])}


# -------------------------------------------------------------------------------------------- main


def table(rows: dict[str, dict[str, Any]]) -> str:
    lines = ["| method | R@5 | R@10 | SessR@10 | MRR@10 | ms/query |", "|---|---|---|---|---|---|"]
    for name, result in rows.items():
        o = result["overall"]
        lines.append(
            f"| {name} | {o['R@5']:.3f} | {o['R@10']:.3f} | {o['SessR@10']:.3f} | {o['MRR@10']:.3f} "
            f"| {result['ms_per_query']:.1f} |"
        )
    return "\n".join(lines)


def category_table(rows: dict[str, dict[str, Any]]) -> str:
    cats = sorted({c for r in rows.values() for c in r["categories"]})
    first = next(iter(rows.values()))["categories"]
    head = " | ".join(f"{c} {CATEGORY_NAMES.get(c, '')} (n={first[c]['n']})" for c in cats)
    lines = [f"| R@10 by category | {head} |", "|---" * (len(cats) + 1) + "|"]
    for name, result in rows.items():
        cells = " | ".join(f"{result['categories'][c]['R@10']:.3f}" for c in cats)
        lines.append(f"| {name} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo10_dev.json (or locomo10.json)")
    parser.add_argument("--database-url", default=None, help="SQL URL (default: a SQLite file in a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--fp32", action="store_true", help="run the embedding model in fp32, not int8")
    args = parser.parse_args()

    conversations = load(args.data)
    n_turns = sum(len(c.turns) for c in conversations)
    with open_memory("locomo", database_url=args.database_url, fp32=args.fp32) as memory:
        service, embedder = memory.service, memory.embedder
        started = time.perf_counter()
        for conv in conversations:
            service.apply_writes(conv.sample_id, memory_writes(conv))
        ingest = time.perf_counter() - started

        results: dict[str, dict[str, Any]] = {}
        results["memory (hybrid)"] = evaluate(conversations, memory_ranker(service))
        # Ablations: each stage after fusion off in turn, then fusion alone (the previous default).
        for name, change in ABLATIONS.items():
            results[name] = evaluate(conversations, memory_ranker(memory.variant(RankingPolicy(**change))))
        # The same turns written one call each, as an agent writes them over MCP (separate owners):
        # each turn's neighbours must come out as in one batch.
        for conv in conversations:
            for write in memory_writes(conv):
                service.apply_write(conv.sample_id + "#one", write)
        results["memory (hybrid), one write a turn"] = evaluate(conversations, memory_ranker(service, "#one"))
        # The same turns as other writers send them, each way under owners of its own.
        written: dict[str, tuple[str, Callable[[Conversation], list[MemoryWrite]]]] = {
            # Ablation: without neighbouring turns as context.
            "memory (hybrid), no neighbour context": ("#bare", lambda c: memory_writes(c, with_context=False)),
            # The metadata keys in another writer's style.
            "memory (hybrid), metadata keys " + ", ".join(STYLED_KEYS): (
                "#styled",
                lambda c: memory_writes(c, keys=STYLED_KEYS),
            ),
            # The speaker named in the metadata only, as a writer that keeps the turn's words apart.
            "memory (hybrid), speaker in metadata only": ("#said", lambda c: memory_writes(c, speaker_in_value=False)),
            # The session's date as a Unix time under `timestamp`, as a program that logs time.time() sends it.
            "memory (hybrid), date as a Unix time": (
                "#unix",
                lambda c: memory_writes(c, keys=("session", "timestamp", "speaker"), unix_times=True),
            ),
            # Each turn sent as the value itself, a JSON object, with no metadata.
            "memory (hybrid), turns as JSON values": ("#json", json_writes),
        }
        for label, (suffix, writes_of) in written.items():
            for conv in conversations:
                service.apply_writes(conv.sample_id + suffix, writes_of(conv))
            results[label] = evaluate(conversations, memory_ranker(service, suffix))
        bm25 = bm25_ranker(conversations)
        dense = dense_ranker(conversations, embedder)
        results["baseline BM25 (rank_bm25)"] = evaluate(conversations, bm25)
        results["baseline dense MiniLM"] = evaluate(conversations, dense)
        results["baseline RRF(BM25, dense)"] = evaluate(conversations, rrf_ranker(bm25, dense))

    n_questions = sum(len(c.questions) for c in conversations)
    print(f"LoCoMo {args.data.name}: {len(conversations)} conversations, {n_turns} turns, {n_questions} questions")
    rate = n_turns / ingest
    print(f"ingest through MemoryService.apply_writes (embedding included): {ingest:.1f} s ({rate:.0f} turns/s)")
    print()
    print(f"Categories 1-4 (n={results['memory (hybrid)']['n']}):")
    print(table(results))
    print()
    print(category_table(results))
    if args.json:
        args.json.write_text(json.dumps({"ingest_seconds": ingest, "turns": n_turns, "results": results}, indent=2))


if __name__ == "__main__":
    main()
