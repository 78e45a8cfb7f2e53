"""The entity and temporal stages on real stores: who a question names, and when it asks about."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from pydantic import ValidationError
from sqlalchemy import select, update

from cluster.core.ports import Embedder
from cluster.memory.index import MilvusMemoryIndex
from cluster.memory.models import MemoryHit, MemoryQuery, MemoryWrite, ServedMemory
from cluster.memory.policy import RankingPolicy
from cluster.memory.repository.queue import IndexQueue
from cluster.memory.repository.search import Search
from cluster.memory.service import MemoryService
from cluster.memory.tables import MemoryRow
from cluster.storage.db import Database
from tests.integration.memory.conftest import T0

pytestmark = pytest.mark.milvus

FUSION_ONLY = RankingPolicy(
    entity_boost=0,
    entity_terms_lexical=True,
    time_boost=0,
    when_boost=0,
    session_weight=0,
    role_boost=0,
    recency_boost=0,
    coverage_decay=1,
)


def said(key: str, speaker: str, text: str, day: str) -> MemoryWrite:
    # The speaker only in metadata (and keys without names): the entity stage must find it there.
    return MemoryWrite(key=key, value=text, metadata={"speaker": speaker, "date": day})


def top(service: MemoryService, question: str) -> MemoryHit:
    return service.run_query("team", MemoryQuery(query=question, top_k=3), now=T0).hits[0]


@pytest.fixture
def services(database: Database, embedder: Embedder, index: MilvusMemoryIndex) -> tuple[MemoryService, MemoryService]:
    staged = MemoryService(database, embedder, index, cache_bytes=0)
    staged.apply_writes(
        "team",
        [
            said("barn", "Jon", "I painted a big red barn while Gina watched", "2023-04-20"),
            said("sunset", "Gina", "I painted a small sunset over the lake", "2023-04-21"),
            said("group", "Gina", "The support group was really powerful for me", "2023-05-08"),
            said("went", "Gina", "I went to a support group meeting yesterday", "2023-05-08"),
            said("race-april", "Jon", "I ran a charity race for the shelter", "2023-04-02"),
            said("race-may", "Jon", "I ran a charity race for the school", "2023-05-14"),
        ],
        now=T0,
    )
    return staged, MemoryService(database, embedder, index, ranking=FUSION_ONLY, cache_bytes=0)


def test_the_entity_stage_ranks_the_named_persons_memory_first(services: tuple[MemoryService, MemoryService]) -> None:
    staged, fusion_only = services
    # Jon's memory names Gina and painting: by words alone it is the better match.
    assert top(fusion_only, "What did Gina paint?").memory.key == "barn"
    hit = top(staged, "What did Gina paint?")
    assert hit.memory.key == "sunset"
    assert hit.why.entities == ("Gina",)
    assert "entity" in hit.why.stages


def test_a_when_question_finds_the_memory_that_states_the_time(services: tuple[MemoryService, MemoryService]) -> None:
    staged, _ = services
    hit = top(staged, "When did Gina go to the support group?")
    assert hit.memory.key == "went"
    assert hit.why.time == "yesterday"
    assert "time" in hit.why.stages


def test_a_time_in_the_question_selects_memories_of_that_time(services: tuple[MemoryService, MemoryService]) -> None:
    staged, fusion_only = services
    question = "Which charity race did Jon run in May 2023?"
    assert top(fusion_only, question).memory.key == "race-april"  # same words; the older one comes first
    hit = top(staged, question)
    assert hit.memory.key == "race-may"
    assert hit.why.time == "memory date"
    assert {"entity", "time"} <= set(hit.why.stages)


def test_relative_times_are_read_from_the_querys_own_now(services: tuple[MemoryService, MemoryService]) -> None:
    staged, _ = services
    question = "Which charity race did Jon run two weeks ago?"

    def asked(now: datetime | None) -> MemoryHit:
        return staged.run_query("team", MemoryQuery(query=question, top_k=3, now=now), now=T0).hits[0]

    # Asked on 28 May 2023, "two weeks ago" is 8-14 May: the race of 14 May.
    may = asked(datetime(2023, 5, 28, tzinfo=UTC))
    assert (may.memory.key, may.why.time) == ("race-may", "memory date")
    # Asked on 16 April 2023, it is the race of 2 April; and both stay visible, for ``now`` filters nothing.
    april = asked(datetime(2023, 4, 16, tzinfo=UTC))
    assert (april.memory.key, april.why.time) == ("race-april", "memory date")
    # Without it, the query's time is the clock's (T0, 2026): no memory is of two weeks before.
    assert asked(None).why.time is None


def test_a_query_time_that_is_no_time_is_refused_naming_the_field() -> None:
    for bad in ("last tuesday", "2023-13-01", "", 1685000000):
        with pytest.raises(ValidationError) as refused:
            MemoryQuery(query="what did I buy?", now=bad)
        assert refused.value.errors()[0]["loc"] == ("now",)
    assert MemoryQuery(query="q", now="2023-05-28T10:00:00Z").now == datetime(2023, 5, 28, 10, tzinfo=UTC)


def test_entity_names_are_the_distinct_strings_an_owners_memories_name(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    memory = MemoryService(database, embedder, index)
    people = {"people": ["Bob", "Eve"], "place": {"city": "Paris"}, "location": 3, "session": "s1"}
    memory.apply_write(
        "alice",
        MemoryWrite(key="a", value="one", entity="Project Apollo", metadata={"speaker": "Caroline", **people}),
        now=T0,
    )
    memory.apply_write(
        "alice",
        MemoryWrite(key="b", value="two", metadata={"speaker": "Caroline", "author": "Melanie", "person": ""}),
        now=T0,
    )
    memory.apply_write("bob", MemoryWrite(key="c", value="three", metadata={"speaker": "Zed"}), now=T0)

    def names(after: int) -> tuple[set[str], int]:
        with database.read() as session:
            return Search(session, "alice", database.dialect).entity_names(after)

    found, newest = names(-1)
    # Only strings count: not a list, an object or a number under a name key, nor an empty name.
    assert found == {"Project Apollo", "Caroline", "Melanie"}
    # A name key in another style counts; a key that only looks like one does not.
    memory.apply_write(
        "alice", MemoryWrite(key="s", value="styled", metadata={"Speaker-Name": "Gina", "speakers_list": "Jon"}), now=T0
    )
    styled, newest = names(newest)
    assert styled == {"Gina"}
    memory.apply_write(
        "alice", MemoryWrite(key="d", value="four", metadata={"speaker": "Dora", "author": "Melanie"}), now=T0
    )
    grown, newer = names(newest)
    assert (grown, newer > newest) == ({"Dora", "Melanie"}, True)
    assert names(newer) == (set(), newer)
    # Metadata that is not an object (only a direct SQL write can store it) names nothing, fails nothing.
    with database.transaction() as session:
        session.execute(update(MemoryRow).where(MemoryRow.key == "b").values(meta=["Melanie"]))
    assert names(-1)[0] == {"Project Apollo", "Caroline", "Gina", "Dora", "Melanie"}


def test_a_speaker_only_the_metadata_names_is_in_the_memorys_vector_however_it_is_made(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    # Questions name people ("What did Caroline do?"); a turn's bare words would embed without them.
    service = MemoryService(database, embedder, index)
    bare = MemoryWrite(key="bare", value="I went to a support group yesterday", metadata={"speakerName": "Caroline"})
    named = MemoryWrite(key="named", value="Melanie: I painted a sunrise", metadata={"speaker": "Melanie"})
    written = service.apply_writes("team", [bare, named], now=T0)
    with database.read() as session:
        seq_of = dict(session.execute(select(MemoryRow.key, MemoryRow.seq)).all())
    seqs = [seq_of["bare"], seq_of["named"]]

    def similarity(text: str) -> dict[int, float]:
        return {h.seq: h.similarity for h in index.search("team", embedder.embed([text])[0], 2)}

    said = ["Caroline: I went to a support group yesterday", "Melanie: I painted a sunrise"]
    # Written, then rebuilt from SQL: each vector is its memory's text as said by its speaker.
    for _ in ("written", "rebuilt"):
        for seq, text in zip(seqs, said, strict=True):
            assert similarity(text)[seq] == pytest.approx(1.0, abs=1e-3)
        service.reindex("team")
    # Queued vector work (a write whose Milvus upsert failed) embeds the same text; SQL keeps the value.
    with database.read() as session:
        assert [s.text for s in IndexQueue(session, "team", database.dialect).sources(seqs)] == said
    assert service.get("team", written[0].memory_id).value == "I went to a support group yesterday"


def test_a_json_value_tells_its_conversation_day_and_people_as_metadata_would(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    # A writer that sends each turn as the value itself, with no metadata.
    service = MemoryService(database, embedder, index, cache_bytes=0)
    turns = [
        {"speaker": "Gina", "text": "What have you been reading lately?", "session": 4, "date": "8 May 2023"},
        {"speaker": "Jon", "text": "Mostly Becky Chambers, the Wayfarers.", "session": 4, "date": "8 May 2023"},
        {"speaker": "Gina", "text": "I painted a sunset over the lake", "session": 5, "date": "9 June 2023"},
    ]
    service.apply_writes("team", [MemoryWrite(key=f"t{i}", value=v) for i, v in enumerate(turns)], now=T0)
    with database.read() as session:
        contexts = dict(session.execute(select(MemoryRow.key, MemoryRow.context)).all())
        names, _ = Search(session, "team", database.dialect).entity_names(0)
    # The session field links the first two turns (each is the other's context), not the third.
    assert "What have you been reading lately?" in (contexts["t1"] or "")
    assert contexts["t2"] is None
    # The speakers are the owner's entities (read in SQL), and each turn speaks of its own day.
    assert names == {"Gina", "Jon"}
    hit = service.run_query("team", MemoryQuery(query="what was Jon reading in May 2023", top_k=3), now=T0).hits[0]
    assert hit.memory.key == "t1"
    assert hit.why.entities == ("Jon",)
    assert ServedMemory.of(hit).day == date(2023, 5, 8)
