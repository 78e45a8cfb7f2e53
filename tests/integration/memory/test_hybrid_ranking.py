"""Dense and lexical ranking each miss something the other finds; the fused ranking finds both."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text, update

from cluster.core.ports import Embedder
from cluster.memory.index import MilvusMemoryIndex
from cluster.memory.models import MemoryQuery, MemoryWrite
from cluster.memory.policy import RankingPolicy
from cluster.memory.repository.search import Search, Visibility
from cluster.memory.service import MemoryService
from cluster.memory.tables import MemoryRow
from cluster.storage.db import Database
from tests.integration.memory.conftest import T0

pytestmark = pytest.mark.milvus

MEMORIES = {
    "locker_2209": "The key for locker 2209 is in the top desk drawer",
    "locker_4417": "Spare key of 4417 sits under the doormat",
    "dog": "Alice adopted a golden retriever puppy last spring",
    "compiler": "Alice is writing a compiler in Rust as a side project",
    "holiday": "Alice spent the holidays skiing in the Alps",
}
# question -> the memory that answers it
QUESTIONS = {
    # An exact identifier: only the lexical side tells 4417 from 2209; to the embedding model the
    # other locker's sentence reads closer.
    "Where is the key for locker 4417?": "locker_4417",
    # A paraphrase: no content word in common with the answer, which only the dense side sees.
    "What kind of animal does she keep at home?": "dog",
}


def reciprocal_rank(service: MemoryService, question: str, gold: str) -> float:
    keys = [hit.memory.key for hit in service.run_query("alice", MemoryQuery(query=question, top_k=5), now=T0).hits]
    return 1.0 / (keys.index(gold) + 1) if gold in keys else 0.0


def test_hybrid_ranking_beats_dense_alone_and_lexical_alone(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    hybrid = MemoryService(database, embedder, index, cache_bytes=0)
    hybrid.apply_writes("alice", [MemoryWrite(key=k, value=v) for k, v in MEMORIES.items()], now=T0)
    dense = MemoryService(
        database, embedder, index, ranking=RankingPolicy(lexical_weight=0.0, expansion_weight=0.0), cache_bytes=0
    )
    lexical = MemoryService(
        database, embedder, index, ranking=RankingPolicy(dense_weight=0.0, expansion_weight=0.0), cache_bytes=0
    )

    def mrr(service: MemoryService) -> float:
        return sum(reciprocal_rank(service, q, gold) for q, gold in QUESTIONS.items()) / len(QUESTIONS)

    scores = {"hybrid": mrr(hybrid), "dense": mrr(dense), "lexical": mrr(lexical)}
    assert scores["hybrid"] > scores["dense"], scores
    assert scores["hybrid"] > scores["lexical"], scores
    assert scores["hybrid"] == 1.0, scores


def test_memories_the_words_rank_equally_come_oldest_first_whatever_order_the_table_holds(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    memory = MemoryService(database, embedder, index, cache_bytes=0)
    places = ("zoo", "gym", "inn")
    memory.apply_writes("jon", [MemoryWrite(key=p, value=f"I ran a charity race for the {p}") for p in places], now=T0)
    with database.transaction() as session:
        seqs = list(session.scalars(select(MemoryRow.seq).where(MemoryRow.owner == "jon").order_by(MemoryRow.seq)))
        # An update writes the row anew: Postgres then holds the oldest memory last in its table.
        session.execute(update(MemoryRow).where(MemoryRow.seq == seqs[0]).values(access_count=1))
    with database.read() as session:
        if database.dialect == "postgresql":  # a plan that reads the table in its stored order
            session.execute(text("SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off"))
        hits = Search(session, "jon", database.dialect).lexical("charity race", Visibility(valid_at=T0), 3)
    assert len({round(h.score, 9) for h in hits}) == 1, hits  # the same words: one score
    assert [h.seq for h in hits] == seqs
