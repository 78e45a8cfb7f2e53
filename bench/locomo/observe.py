"""LoCoMo through the raw log: every turn sent to ``memory_observe``, one maintenance pass, then the questions.

What an agent that logs its turns and lets the write rules decide gets back: each turn is logged
with its speaker, session (``session_id`` = the session number) and time (``at``: the session's
date, a second apart), one owner per conversation; one re-evaluation runs a day after the last
turn; every question is a query within its own conversation. Twice: as an agent sends turns (the
time in ``at`` only) and with the session's date in each turn's metadata too. Prints how many turns
were promoted and by which rule, R@10 over all the evidence (a turn never promoted is a miss) and
over the evidence that was promoted (what ranking can reach), per category 1-4.

    .venv/bin/python -m bench.locomo.observe [--data PATH]

The data set is CC BY-NC 4.0 and is read from outside the repository; never copy it in.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from bench.locomo.run import CATEGORY_NAMES, DEFAULT_DATA, HEADLINE, Conversation, load, score
from cluster.embedding import OnnxMiniLMEmbedder
from cluster.memory.index import MilvusMemoryIndex
from cluster.memory.models import MemoryObserve, MemoryQuery, Turn
from cluster.memory.service import MemoryService
from cluster.memory.tables import MemoryRow
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from cluster.storage.milvus import open_milvus


def said_at(date_time: str, index: int) -> datetime:
    """A turn's time: its session's date ("1:56 pm on 8 May, 2023"), ``index`` seconds on."""
    day = datetime.strptime(date_time.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    return day + timedelta(seconds=index)


def observe_all(service: MemoryService, conv: Conversation, owner: str, *, dated: bool) -> datetime:
    """Log every turn of ``conv`` for ``owner`` (``dated``: the session's date in its metadata too);
    returns the last turn's time."""
    last = datetime.min.replace(tzinfo=UTC)
    for i, turn in enumerate(conv.turns):
        last = said_at(turn.date_time, i)
        meta = {"dia_id": turn.dia_id, **({"session_date_time": turn.date_time} if dated else {})}
        said = Turn(speaker=turn.speaker, text=turn.text, at=last, metadata=meta)
        service.apply_observe(owner, MemoryObserve(session_id=f"session-{turn.session}", turn=said), now=last)
    return last


def run(service: MemoryService, database: Database, conversations: list[Conversation], *, dated: bool) -> None:
    """Observe, re-evaluate and ask, each conversation as its own owner (``dated``: the session's date
    in each turn's metadata too, separate owners); print the figures."""
    suffix = "#dated" if dated else ""
    started = time.perf_counter()
    ends = {c.sample_id: observe_all(service, c, c.sample_id + suffix, dated=dated) for c in conversations}
    logged = time.perf_counter() - started
    started = time.perf_counter()
    for conv in conversations:
        service.reevaluate(conv.sample_id + suffix, now=ends[conv.sample_id] + timedelta(days=1))
    reevaluated = time.perf_counter() - started

    owners = [c.sample_id + suffix for c in conversations]
    with database.read() as session:
        rows = session.execute(select(MemoryRow.owner, MemoryRow.meta).where(MemoryRow.owner.in_(owners))).all()
    promoted: dict[str, set[str]] = defaultdict(set)
    rules: Counter[str] = Counter()
    for owner, meta in rows:
        promoted[owner].add(meta["dia_id"])
        rules[meta["promoted"]] += 1

    every: dict[int, list[float]] = defaultdict(list)
    reachable: dict[int, list[float]] = defaultdict(list)
    for conv in conversations:
        owner = conv.sample_id + suffix
        for question in conv.questions:
            if question.category not in HEADLINE:
                continue
            hits = service.run_query(owner, MemoryQuery(query=question.question, top_k=10)).hits
            ranked = [str(hit.memory.metadata.get("dia_id")) for hit in hits]
            every[question.category].append(score(ranked, question.gold)[1])
            kept = [g for g in question.gold if g in promoted[owner]]
            if kept:
                reachable[question.category].append(score(ranked, kept)[1])

    turns = sum(len(c.turns) for c in conversations)
    stored = len(rows)
    print("with the session's date in each turn's metadata" if dated else "the turn's time in `at` only")
    print(f"{turns} turns observed in {logged:.1f} s; re-evaluation {reevaluated:.1f} s")
    print(f"memories {stored} ({stored / turns:.0%} of turns): {dict(rules)}")
    print()
    print("| R@10 | all | " + " | ".join(f"{c} {CATEGORY_NAMES[c]}" for c in HEADLINE) + " |")
    print("|---" * (len(HEADLINE) + 2) + "|")
    for name, table in (("all evidence", every), ("promoted evidence", reachable)):
        flat = [r for c in HEADLINE for r in table[c]]
        cells = " | ".join(f"{sum(table[c]) / max(len(table[c]), 1):.3f}" for c in HEADLINE)
        print(f"| {name} (n={len(flat)}) | {sum(flat) / len(flat):.3f} | {cells} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo10_dev.json (or locomo10.json)")
    args = parser.parse_args()

    conversations = load(args.data)
    print(f"LoCoMo {args.data.name}: {len(conversations)} conversations")
    with tempfile.TemporaryDirectory(prefix="locomo-observe-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'memory.db'}"
        upgrade(url)
        database = Database(url)
        milvus = open_milvus(str(Path(tmp) / "milvus.db"))
        embedder = OnnxMiniLMEmbedder(threads=1)
        embedder.embed(["warm up"])
        index = MilvusMemoryIndex(milvus, dimension=embedder.dimension, collection="locomo_observe")
        index.reset()
        service = MemoryService(database, embedder, index)
        run(service, database, conversations, dated=False)
        run(service, database, conversations, dated=True)
        milvus.close()
        database.dispose()


if __name__ == "__main__":
    main()
