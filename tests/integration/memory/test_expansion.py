"""Query expansion on real stores and the real embedder: a question that shares no word with its answer."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from cluster.core.ports import Embedder
from cluster.memory.index import MilvusMemoryIndex
from cluster.memory.models import MemoryForget, MemoryQuery, MemoryWrite
from cluster.memory.policy import RankingPolicy
from cluster.memory.repository.search import Search
from cluster.memory.service import MemoryService
from cluster.storage.db import Database
from tests.integration.memory.conftest import T0

pytestmark = pytest.mark.milvus

SAID = [
    ("shelter", "Melanie", "I adopted a puppy from the shelter, he chews everything."),
    ("sofa", "Melanie", "We bought a new couch for the living room."),
    ("cinema", "Melanie", "The movie last night was wonderful, we cried at the end."),
    ("tax", "Melanie", "My accountant sent the invoice for the tax return."),
    ("car", "Melanie", "The car needs new tyres before winter."),
    ("talk", "Caroline", "The counselling workshop was long but useful."),
    ("bank", "Caroline", "I finally opened a savings account at the bank."),
]


@pytest.fixture
def services(database: Database, embedder: Embedder, index: MilvusMemoryIndex) -> tuple[MemoryService, MemoryService]:
    expanding = MemoryService(database, embedder, index, cache_bytes=0)
    expanding.apply_writes(
        "fleet",
        [MemoryWrite(key=k, value=f"{who}: {text}", metadata={"speaker": who}) for k, who, text in SAID],
        now=T0,
    )
    plain = MemoryService(database, embedder, index, ranking=RankingPolicy(expansion_weight=0), cache_bytes=0)
    return expanding, plain


QUESTION = "What kind of dog does Melanie have?"


def test_expansion_words_come_from_the_owners_memories_and_say_so(
    services: tuple[MemoryService, MemoryService],
) -> None:
    expanding, plain = services
    result = expanding.run_query("fleet", MemoryQuery(query=QUESTION, top_k=3), now=T0)
    assert result.expansions, "the question's words should have neighbours among the owner's words"
    owner_words = {w.strip(".,").lower() for _, _, text in SAID for w in text.split()}
    assert "puppy" in result.expansions
    assert set(result.expansions) <= owner_words
    assert "melanie" not in result.expansions  # names are the entity stage's
    hit = result.hits[0]
    assert hit.memory.key == "shelter"
    assert "expansion" in hit.why.stages
    assert hit.why.expanded == ("puppy",)
    # Without expansion nothing says so.
    unexpanded = plain.run_query("fleet", MemoryQuery(query=QUESTION, top_k=3), now=T0)
    assert unexpanded.expansions == ()
    assert all("expansion" not in h.why.stages and not h.why.expanded for h in unexpanded.hits)


def test_another_process_expands_the_same_way(
    services: tuple[MemoryService, MemoryService], database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    expanding, _ = services
    expanding.run_query("fleet", MemoryQuery(query=QUESTION, top_k=5), now=T0)  # builds this process's term space
    # A memory written after the first service built its term space: both see it at the next query.
    expanding.apply_write(
        "fleet", MemoryWrite(key="kennel", value="Melanie: The kennel keeps our pup while we travel."), now=T0
    )
    fresh = MemoryService(database, embedder, index, cache_bytes=0)
    again, other = (
        expanding.run_query("fleet", MemoryQuery(query=QUESTION, top_k=5), now=T0),
        fresh.run_query("fleet", MemoryQuery(query=QUESTION, top_k=5), now=T0),
    )
    assert again.expansions == other.expansions
    assert [h.memory.key for h in again.hits] == [h.memory.key for h in other.hits]
    assert "kennel" in [h.memory.key for h in again.hits]


def test_a_forgotten_memorys_words_are_no_longer_expansions_in_any_process(
    services: tuple[MemoryService, MemoryService], database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    expanding, _ = services
    assert "puppy" in expanding.run_query("fleet", MemoryQuery(query=QUESTION, top_k=5), now=T0).expansions
    shelter = next(
        h.memory for h in expanding.run_query("fleet", MemoryQuery(query="adopted puppy shelter", top_k=1), now=T0).hits
    )
    expanding.apply_forget("fleet", MemoryForget(memory_id=shelter.memory_id))
    # This process's term space still holds "puppy"; the store no longer does.
    after = expanding.run_query("fleet", MemoryQuery(query=QUESTION, top_k=5), now=T0)
    fresh = MemoryService(database, embedder, index, cache_bytes=0).run_query(
        "fleet", MemoryQuery(query=QUESTION, top_k=5), now=T0
    )
    assert "puppy" not in after.expansions
    assert after.expansions == fresh.expansions
    assert [h.memory.key for h in after.hits] == [h.memory.key for h in fresh.hits]


class Counting:
    """The real embedder, recording what it is asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.texts: list[str] = []

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return self.inner.embed(texts)


def test_word_vectors_are_embedded_once_for_every_process(
    services: tuple[MemoryService, MemoryService], database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    first = MemoryService(database, embedder, index, cache_bytes=0, embedder_name="minilm test")
    expected = first.run_query("fleet", MemoryQuery(query=QUESTION, top_k=5), now=T0)
    assert first.words is not None
    first.words.wait()
    # A fresh process reads the owner's words and the question's from SQL: it embeds only the question.
    counting = Counting(embedder)
    second = MemoryService(database, counting, index, cache_bytes=0, embedder_name="minilm test")
    got = second.run_query("fleet", MemoryQuery(query=QUESTION, top_k=5), now=T0)
    assert counting.texts == [QUESTION]
    assert got.expansions == expected.expansions
    assert "puppy" in got.expansions
    assert [(h.memory.key, h.score) for h in got.hits] == [(h.memory.key, h.score) for h in expected.hits]
    # Another embedder's vectors are not comparable: its process embeds every word itself.
    other = Counting(embedder)
    MemoryService(database, other, index, cache_bytes=0, embedder_name="another model").run_query(
        "fleet", MemoryQuery(query=QUESTION, top_k=5), now=T0
    )
    assert "puppy" in other.texts


def test_the_writes_leave_the_next_querys_term_space_ready(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    counting = Counting(embedder)
    service = MemoryService(database, counting, index, cache_bytes=0)
    service.apply_writes("burst", [MemoryWrite(key=k, value=f"{who}: {text}") for k, who, text in SAID], now=T0)
    assert "puppy" in service.terms.space("burst", lambda after: ([], after))
    counting.texts.clear()
    # The first query embeds itself and its own words, none of the owner's: the writes did that.
    result = service.run_query("burst", MemoryQuery(query=QUESTION, top_k=3), now=T0)
    assert "puppy" in result.expansions
    assert counting.texts[0] == QUESTION
    assert not {"puppy", "shelter", "couch", "accountant"} & set(counting.texts)
    # One more write: only its new words are embedded, at the write.
    service.apply_write("burst", MemoryWrite(key="kitten", value="Caroline: We adopted a kitten."), now=T0)
    assert "kitten" in counting.texts
    assert "kitten" in service.terms.space("burst", lambda after: ([], after))


def test_held_words_are_words_of_a_memorys_text_alone(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    # A context copied from a neighbour (or a key) may name what only a forgotten memory said:
    # such a word must not count as held, on either database.
    service = MemoryService(database, embedder, index, cache_bytes=0)
    service.apply_write(
        "fleet",
        MemoryWrite(key="pets/kitten", value="We adopted a puppy.", context="The kitten sleeps all day."),
        now=T0,
    )
    with database.read() as session:
        held = Search(session, "fleet", database.dialect).held_words(["puppy", "kitten", "sleeps", "pets"])
    assert held == {"puppy"}


def test_a_batch_indexed_later_is_expanded_from_stored_words_in_every_process(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    writer = MemoryService(database, embedder, index, cache_bytes=0, embedder_name="minilm test")
    thread = writer.indexing
    # The writer's indexing thread held: the jobs are only noted, as a slow replica would leave them.
    jobs: list[tuple[str, list[int]]] = []
    writer.indexing = type(thread)(lambda owner, seqs: jobs.append((owner, list(seqs))))
    writes = [MemoryWrite(key=k, value=f"{who}: {text}") for k, who, text in SAID]
    writer.apply_writes("bulk", writes, now=T0, index_later=True)
    writer.indexing.wait()
    # Before the vectors are made, a query in another process embeds only itself: the batch's words
    # are not in its term space yet, and the query says how many memories it could not see by meaning.
    counting = Counting(embedder)
    reader = MemoryService(database, counting, index, cache_bytes=0, embedder_name="minilm test")
    early = reader.run_query("bulk", MemoryQuery(query=QUESTION, top_k=3), now=T0)
    assert early.unindexed == len(SAID)
    assert early.expansions == ()
    assert counting.texts == [QUESTION]
    # The writer's thread does the jobs: the vectors of the memories and of their words, stored in SQL
    # before the memories count as indexed; a third process then reads the owner's words and embeds
    # only the query and its own words.
    for owner, seqs in jobs:
        thread.request(owner, seqs)
    thread.wait()
    assert writer.unindexed("bulk") == 0
    fresh = Counting(embedder)
    late = MemoryService(database, fresh, index, cache_bytes=0, embedder_name="minilm test")
    result = late.run_query("bulk", MemoryQuery(query=QUESTION, top_k=3), now=T0)
    assert result.unindexed == 0
    assert "puppy" in result.expansions
    assert fresh.texts[0] == QUESTION
    assert not {"puppy", "shelter", "couch", "accountant", "melanie"} & set(fresh.texts)
    assert result.hits[0].memory.key == "shelter"
    # The reader that saw the batch before it was indexed grows its space to the same words.
    assert reader.run_query("bulk", MemoryQuery(query=QUESTION, top_k=3), now=T0).expansions == result.expansions
