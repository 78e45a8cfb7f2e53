"""Long-term memory on SQLite and Postgres with Milvus Lite: versions, lifetimes, isolation, retrieval."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from cluster.core.errors import Conflict, InvalidInput, NotFound
from cluster.core.ports import Embedder
from cluster.embedding import CachedEmbedder
from cluster.memory.index import MilvusMemoryIndex
from cluster.memory.models import (
    MAX_SOURCE_IDS,
    MemoryForget,
    MemoryObserve,
    MemoryQuery,
    MemoryUpdate,
    MemoryWrite,
    ServedMemory,
    SessionEnd,
    Turn,
)
from cluster.memory.policy import ActivityPolicy, MemoryScope, MemoryState, RankingPolicy, Ttl
from cluster.memory.service import MemoryService
from cluster.services import build_memory_service
from cluster.settings import load_settings
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from tests.integration.memory.conftest import T0

pytestmark = pytest.mark.milvus


def ids(result: object) -> list[uuid.UUID]:
    return [hit.memory.memory_id for hit in result.hits]  # type: ignore[attr-defined]


def test_superseded_versions_are_hidden_by_default_and_visible_with_history(memory: MemoryService) -> None:
    first = memory.apply_write(
        "alice", MemoryWrite(key="environment", value="The project runs on the test environment"), now=T0
    ).memory_id
    second = memory.apply_write(
        "alice",
        MemoryWrite(key="environment", value="The project switched to the production environment"),
        now=T0 + timedelta(days=7),
    ).memory_id
    later = T0 + timedelta(days=8)

    current = memory.run_query("alice", MemoryQuery(query="which environment does the project use"), now=later)
    assert ids(current) == [second]
    assert current.hits[0].memory.version == 2

    history = memory.run_query(
        "alice", MemoryQuery(query="which environment does the project use", include_history=True), now=later
    )
    assert set(ids(history)) == {first, second}
    old = next(h.memory for h in history.hits if h.memory.memory_id == first)
    assert old.state is MemoryState.SUPERSEDED

    then = memory.run_query(
        "alice", MemoryQuery(query="which environment does the project use", as_of=T0 + timedelta(days=1)), now=later
    )
    assert ids(then) == [first]


def test_a_repeated_write_is_done_once_and_a_changed_one_is_a_new_version(memory: MemoryService) -> None:
    first = memory.apply_write(
        "alice", MemoryWrite(key="editor", value="Alice edits in vim", entity="alice"), now=T0
    ).memory_id
    # A retry whose first answer was lost, minutes later: the same version comes back.
    again = memory.apply_writes(
        "alice", [MemoryWrite(key="editor", value="Alice edits in vim", entity="alice")], now=T0 + timedelta(minutes=5)
    )
    assert (again[0].memory_id, again[0].version) == (first, 1)
    history = memory.run_query(
        "alice", MemoryQuery(query="which editor", include_history=True), now=T0 + timedelta(hours=1)
    )
    assert ids(history) == [first]

    other_metadata = memory.apply_write(
        "alice", MemoryWrite(key="editor", value="Alice edits in vim", entity="alice", metadata={"via": "chat"})
    ).memory_id
    assert memory.get("alice", other_metadata).version == 2
    # A window counted from the write starts anew when written again: a renewal, so a new version.
    windowed = memory.apply_write(
        "alice", MemoryWrite(key="mood", value="Alice is busy", ttl=Ttl.window(3600)), now=T0
    ).memory_id
    renewed = memory.apply_write(
        "alice", MemoryWrite(key="mood", value="Alice is busy", ttl=Ttl.window(3600)), now=T0 + timedelta(minutes=30)
    ).memory_id
    assert renewed != windowed
    assert memory.get("alice", renewed).version == 2


def test_writes_repeated_inside_one_batch_make_one_version(memory: MemoryService) -> None:
    write = MemoryWrite(key="city", value="Alice lives in Lyon")
    results = memory.apply_write_batch([("alice", write), ("alice", write)], now=T0)
    assert [r.memory_id for r in results] == [results[0].memory_id] * 2  # type: ignore[union-attr]
    assert all(r.version == 1 for r in results)  # type: ignore[union-attr]


def test_update_writes_a_new_version_and_refuses_a_superseded_one(memory: MemoryService) -> None:
    first = memory.apply_write(
        "alice", MemoryWrite(key="timezone", value="Alice works in UTC", metadata={"source": "chat"}), now=T0
    ).memory_id
    result = memory.apply_update(
        "alice", MemoryUpdate(memory_id=first, value="Alice works in CET"), now=T0 + timedelta(hours=1)
    )
    assert result.version == 2
    assert result.superseded_id == first
    record = memory.get("alice", result.memory_id)
    assert record.value == "Alice works in CET"
    assert record.metadata == {"source": "chat"}
    with pytest.raises(
        Conflict, match=rf"version 1\) is no longer current; the current version is 2 \(id {result.memory_id}\)"
    ):
        memory.apply_update("alice", MemoryUpdate(memory_id=first, value="Alice works in PST"))


def test_structured_values_round_trip_and_are_searchable(memory: MemoryService) -> None:
    memory_id = memory.apply_write(
        "alice", MemoryWrite(key="order", value={"order_id": "A-17", "status": "shipped"}), now=T0
    ).memory_id
    found = memory.run_query("alice", MemoryQuery(query="order A-17 status"), now=T0)
    assert ids(found)[0] == memory_id
    assert found.hits[0].memory.value == {"order_id": "A-17", "status": "shipped"}


def test_expired_memories_are_never_returned_and_purge_removes_them(memory: MemoryService) -> None:
    meeting = memory.apply_write(
        "alice",
        MemoryWrite(key="meeting", value="Alice has a meeting with the design team tomorrow", ttl=Ttl.window(3600)),
        now=T0,
    ).memory_id
    assert ids(
        memory.run_query("alice", MemoryQuery(query="meeting with the design team"), now=T0 + timedelta(minutes=30))
    ) == [meeting]
    after = T0 + timedelta(hours=2)
    assert ids(memory.run_query("alice", MemoryQuery(query="meeting with the design team"), now=after)) == []
    assert (
        ids(
            memory.run_query(
                "alice", MemoryQuery(query="meeting with the design team", include_history=True), now=after
            )
        )
        == []
    )

    report = memory.purge_expired(after)
    assert report.changed == 1
    with pytest.raises(NotFound):
        memory.get("alice", meeting)
    assert memory.index.seqs("alice") == set()


def test_a_window_that_has_not_started_is_not_yet_in_effect(memory: MemoryService) -> None:
    trip = memory.apply_write(
        "alice",
        MemoryWrite(
            key="trip",
            value="Alice is travelling in Hangzhou",
            ttl=Ttl(kind="window", valid_from=T0 + timedelta(days=7), seconds=3 * 86400),
        ),
        now=T0,
    ).memory_id
    assert ids(memory.run_query("alice", MemoryQuery(query="where is Alice travelling"), now=T0)) == []
    assert ids(
        memory.run_query("alice", MemoryQuery(query="where is Alice travelling"), now=T0 + timedelta(days=8))
    ) == [trip]


def test_session_bound_memories_expire_when_the_session_ends(memory: MemoryService) -> None:
    state = memory.apply_write(
        "alice",
        MemoryWrite(
            key="draft",
            value="The draft report is open in the editor",
            scope=MemoryScope.session("s1"),
            ttl=Ttl.session(),
        ),
        now=T0,
    ).memory_id
    fact = memory.apply_write(
        "alice", MemoryWrite(key="editor", value="Alice prefers the vim editor"), now=T0
    ).memory_id
    assert set(ids(memory.run_query("alice", MemoryQuery(query="editor", top_k=5), now=T0))) == {state, fact}
    memory.apply_end_session("alice", SessionEnd(session_id="s1"), now=T0 + timedelta(hours=1))
    assert ids(memory.run_query("alice", MemoryQuery(query="editor", top_k=5), now=T0 + timedelta(hours=2))) == [fact]
    with pytest.raises(InvalidInput):
        memory.apply_write("alice", MemoryWrite(key="x", value="needs a session", ttl=Ttl.session()), now=T0)


def test_scopes_key_user_facts_session_state_and_task_state_separately(memory: MemoryService) -> None:
    user = memory.apply_write("alice", MemoryWrite(key="language", value="Reply to Alice in Chinese"), now=T0).memory_id
    s1 = memory.apply_write(
        "alice",
        MemoryWrite(key="language", value="This session is in English", scope=MemoryScope.session("s1")),
        now=T0,
    ).memory_id
    s2 = memory.apply_write(
        "alice", MemoryWrite(key="language", value="This session is in French", scope=MemoryScope.session("s2")), now=T0
    ).memory_id
    task = memory.apply_write(
        "alice", MemoryWrite(key="language", value="The task output is in German", scope=MemoryScope.task("t9")), now=T0
    ).memory_id
    # Same key, different scopes: four current memories, none superseding another.
    for memory_id in (user, s1, s2, task):
        assert memory.get("alice", memory_id).version == 1
    everything = memory.run_query("alice", MemoryQuery(query="which language", top_k=10), now=T0)
    assert set(ids(everything)) == {user, s1, s2, task}
    only_s2 = memory.run_query("alice", MemoryQuery(query="which language", scope=MemoryScope.session("s2")), now=T0)
    assert ids(only_s2) == [s2]
    only_user = memory.run_query("alice", MemoryQuery(query="which language", scope=MemoryScope.user()), now=T0)
    assert ids(only_user) == [user]
    only_task = memory.run_query("alice", MemoryQuery(query="which language", scope=MemoryScope.task("t9")), now=T0)
    assert ids(only_task) == [task]


def test_entity_filter_comes_before_ranking(memory: MemoryService) -> None:
    bob = memory.apply_write(
        "alice", MemoryWrite(key="bob_food", value="Bob loves spicy noodles", entity="bob"), now=T0
    ).memory_id
    carol = memory.apply_write(
        "alice", MemoryWrite(key="carol_food", value="Carol loves spicy noodles", entity="carol"), now=T0
    ).memory_id
    assert ids(memory.run_query("alice", MemoryQuery(query="who loves spicy noodles", entity="carol"), now=T0)) == [
        carol
    ]
    assert ids(memory.run_query("alice", MemoryQuery(query="who loves spicy noodles", entity="bob"), now=T0)) == [bob]


def test_owners_never_see_each_others_memories(memory: MemoryService) -> None:
    rng = random.Random(20260105)
    owners = ["alice", "bob", "carol", "d\"ave's"]
    topics = ["coffee", "hiking", "python", "paris", "guitar", "budget", "flight", "dentist", "garden", "chess"]
    mine: dict[str, set[uuid.UUID]] = {o: set() for o in owners}
    writes: dict[str, list[MemoryWrite]] = {o: [] for o in owners}
    for i in range(80):
        owner = rng.choice(owners)
        a, b = rng.sample(topics, 2)
        writes[owner].append(MemoryWrite(key=f"k{i % 7}", value=f"notes about {a} and {b} number {i}"))
    for owner, batch in writes.items():
        for result in memory.apply_writes(owner, batch, now=T0):
            mine[owner].add(result.memory_id)
    for _ in range(40):
        owner = rng.choice(owners)
        query = " ".join(rng.sample(topics, 2))
        result = memory.run_query(owner, MemoryQuery(query=query, top_k=10, include_history=rng.random() < 0.5), now=T0)
        assert set(ids(result)) <= mine[owner]
    for owner in owners:
        others = set().union(*(mine[o] for o in owners if o != owner))
        for memory_id in list(others)[:5]:
            with pytest.raises(NotFound):
                memory.get(owner, memory_id)
            with pytest.raises(NotFound):
                memory.apply_forget(owner, MemoryForget(memory_id=memory_id))
            with pytest.raises(NotFound):
                memory.apply_update(owner, MemoryUpdate(memory_id=memory_id, value="overwrite"))
            with pytest.raises(NotFound):
                memory.restore(owner, memory_id)
    # The vector store is constrained by owner as well, not only the SQL that filters it.
    everyone = set().union(*(memory.index.seqs(o) for o in owners))
    for owner in owners:
        assert memory.index.seqs(owner).isdisjoint(everyone - memory.index.seqs(owner))


def test_forget_removes_every_version_from_sql_and_milvus(memory: MemoryService) -> None:
    first = memory.apply_write("alice", MemoryWrite(key="pet", value="Alice has a cat"), now=T0).memory_id
    memory.apply_write("alice", MemoryWrite(key="pet", value="Alice has a cat and a dog"), now=T0 + timedelta(days=1))
    keep = memory.apply_write("alice", MemoryWrite(key="car", value="Alice drives a blue car"), now=T0).memory_id
    assert len(memory.index.seqs("alice")) == 3
    result = memory.apply_forget("alice", MemoryForget(memory_id=first))
    assert result.removed_versions == 2
    assert len(memory.index.seqs("alice")) == 1
    found = memory.run_query(
        "alice", MemoryQuery(query="what pet does Alice have", include_history=True), now=T0 + timedelta(days=2)
    )
    assert ids(found) == [keep]
    with pytest.raises(NotFound):
        memory.apply_forget("alice", MemoryForget(memory_id=first))


def test_the_start_of_an_id_names_the_one_memory_of_its_owner_that_has_it(
    memory: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ids drawn to share their first 8 hex digits in pairs: what a short id must never guess between.
    drawn = iter(uuid.UUID(f"abcd1234{n:023x}0") for n in range(1, 1000))
    monkeypatch.setattr("cluster.memory.writes.uuid.uuid4", lambda: next(drawn))
    cat = memory.apply_write(
        "alice", MemoryWrite(key="pet", value="Alice has a cat"), now=T0
    ).memory_id  # memory ...010, lineage ...020
    car = memory.apply_write(
        "alice", MemoryWrite(key="car", value="Alice drives a blue car"), now=T0
    ).memory_id  # ...030, ...040
    monkeypatch.undo()
    bob = memory.apply_write("bob", MemoryWrite(key="pet", value="Bob has a dog"), now=T0).memory_id
    assert memory.memory_id("alice", str(cat)) == cat
    assert memory.memory_id("alice", cat.hex[:31]) == cat  # ...010 and ...030 part at the 31st digit
    with pytest.raises(InvalidInput, match="more than one memory has an id starting 'abcd1234'"):
        memory.memory_id("alice", "abcd1234")
    # Another owner's memories are no match, nor are prefixes of ids nobody has.
    assert memory.memory_id("bob", bob.hex[:8]) == bob
    with pytest.raises(NotFound):
        memory.memory_id("bob", "abcd1234")
    for malformed in ("abcd123", "abcd123g", "", "-" * 8, "a" * 33):
        with pytest.raises(InvalidInput, match="memory_id must be"):
            memory.memory_id("alice", malformed)
    assert (
        memory.apply_forget("alice", MemoryForget(memory_id=memory.memory_id("alice", car.hex[:32]))).memory_id == car
    )
    assert memory.memory_id("alice", "abcd1234") == cat  # the other is gone: no longer ambiguous


def test_unused_memories_are_archived_and_can_be_restored(memory: MemoryService) -> None:
    used = memory.apply_write(
        "alice", MemoryWrite(key="tea", value="Alice drinks green tea every morning"), now=T0
    ).memory_id
    unused = memory.apply_write("alice", MemoryWrite(key="bike", value="Alice sold her old bike"), now=T0).memory_id
    policy = memory.activity
    # Keep "used" alive by asking about it once a month.
    for month in range(1, 6):
        memory.run_query("alice", MemoryQuery(query="green tea morning", top_k=1), now=T0 + timedelta(days=30 * month))
    later = T0 + timedelta(days=160)
    assert policy.should_archive(policy.initial, T0, later)
    report = memory.decay_and_archive(later)
    assert set(report.memory_ids) == {unused}
    assert ids(memory.run_query("alice", MemoryQuery(query="old bike sold", top_k=5), now=later)) == [used]
    assert memory.get("alice", unused).archived

    memory.restore("alice", unused, now=later)
    assert unused in ids(memory.run_query("alice", MemoryQuery(query="old bike sold", top_k=5), now=later))
    assert memory.decay_and_archive(later + timedelta(days=1)).changed == 0


def test_query_reinforces_activity_of_what_it_returns(memory: MemoryService) -> None:
    memory.apply_write("alice", MemoryWrite(key="tea", value="Alice drinks green tea"), now=T0)
    first = memory.run_query("alice", MemoryQuery(query="green tea", top_k=1), now=T0 + timedelta(days=30))
    assert first.hits[0].why.activity == pytest.approx(0.5, rel=1e-6)
    second = memory.run_query("alice", MemoryQuery(query="tea", top_k=1), now=T0 + timedelta(days=30))
    assert second.hits[0].why.activity == pytest.approx(1.5, rel=1e-6)


def test_explicit_requests_are_stored_at_once(memory: MemoryService) -> None:
    result = memory.apply_observe(
        "alice", MemoryObserve(session_id="s1", turn=Turn(text="Please remember that I am allergic to peanuts")), now=T0
    )
    assert result.promoted is not None
    assert result.reason == "explicit"
    found = memory.run_query("alice", MemoryQuery(query="allergies"), now=T0)
    assert ids(found) == [result.promoted.memory_id]
    assert found.hits[0].memory.source_ids == (str(result.log_id),)


def test_a_turn_referenced_later_is_promoted_by_reevaluation(memory: MemoryService) -> None:
    trip = memory.apply_observe(
        "alice",
        MemoryObserve(session_id="s1", turn=Turn(text="I'm going to Hangzhou next week for the conference")),
        now=T0,
    )
    chatter = memory.apply_observe(
        "alice",
        MemoryObserve(session_id="s1", turn=Turn(text="The weather is nice today")),
        now=T0 + timedelta(minutes=1),
    )
    assert trip.promoted is None
    assert chatter.promoted is None
    assert memory.run_query("alice", MemoryQuery(query="Hangzhou"), now=T0 + timedelta(minutes=2)).hits == ()

    question = Turn(text="Can you check the Hangzhou forecast for the conference days?")
    later = memory.apply_observe("alice", MemoryObserve(session_id="s2", turn=question), now=T0 + timedelta(days=3))
    report = memory.reevaluate(now=T0 + timedelta(days=3, minutes=1))
    report_day = (T0 + timedelta(days=3, minutes=1)).date()
    assert report.changed == 1
    found = memory.run_query("alice", MemoryQuery(query="Hangzhou trip"), now=T0 + timedelta(days=3, minutes=2))
    assert len(found.hits) == 1
    hit = found.hits[0].memory
    assert hit.value == "user: I'm going to Hangzhou next week for the conference"
    assert hit.source_ids == (str(trip.log_id), str(later.log_id))
    assert hit.metadata["promoted"] == "referenced_later"
    # It speaks of the day it was said, not of the day it was promoted.
    assert ServedMemory.of(found.hits[0]).day == T0.date() != report_day
    # Running the job again changes nothing; other owners are untouched.
    assert memory.reevaluate(now=T0 + timedelta(days=3, minutes=5)).changed == 0
    assert memory.run_query("bob", MemoryQuery(query="Hangzhou"), now=T0 + timedelta(days=4)).hits == ()


def test_a_turn_a_whole_conversation_comes_back_to_is_promoted(memory: MemoryService) -> None:
    # More later turns refer to it than a memory's provenance holds: the job promoted nothing and
    # failed on every run, so none of the owner's turns could be promoted any more.
    topic = memory.apply_observe(
        "alice",
        MemoryObserve(session_id="s1", turn=Turn(text="The Hangzhou conference talk is about vector search")),
        now=T0,
    )
    for i in range(MAX_SOURCE_IDS + 20):
        text = f"Another thought on the Hangzhou conference talk, number {i}"
        memory.apply_observe(
            "alice", MemoryObserve(session_id=f"s{2 + i}", turn=Turn(text=text)), now=T0 + timedelta(days=1, minutes=i)
        )
    report = memory.reevaluate("alice", now=T0 + timedelta(days=2))
    by_turn = {record.source_ids[0]: record for record in (memory.get("alice", m) for m in report.memory_ids)}
    promoted = by_turn[str(topic.log_id)]
    assert promoted.value == "user: The Hangzhou conference talk is about vector search"
    assert len(promoted.source_ids) == MAX_SOURCE_IDS


def test_unreferenced_turns_leave_the_queue_after_the_horizon(memory: MemoryService) -> None:
    memory.apply_observe(
        "alice", MemoryObserve(session_id="s1", turn=Turn(text="Just some small talk about nothing")), now=T0
    )
    far = T0 + memory.promotion.horizon + timedelta(days=1)
    assert memory.reevaluate("alice", now=far).changed == 0
    assert memory.reevaluate("alice", now=far).scanned == 0


def test_hot_queries_are_cached_per_owner_and_invalidated_by_writes(memory: MemoryService) -> None:
    memory.apply_write("alice", MemoryWrite(key="tea", value="Alice drinks green tea"), now=T0)
    memory.apply_write("bob", MemoryWrite(key="tea", value="Bob drinks black tea"), now=T0)
    first = memory.run_query("alice", MemoryQuery(query="tea"), now=T0)
    again = memory.run_query("alice", MemoryQuery(query="tea"), now=T0 + timedelta(seconds=1))
    assert not first.cached
    assert again.cached
    assert ids(again) == ids(first)
    assert (memory.cache.hits, memory.cache.misses) == (1, 1)
    memory.run_query("bob", MemoryQuery(query="tea"), now=T0 + timedelta(seconds=1))
    memory.apply_write("bob", MemoryWrite(key="coffee", value="Bob drinks coffee too"), now=T0 + timedelta(seconds=2))
    assert memory.run_query("alice", MemoryQuery(query="tea"), now=T0 + timedelta(seconds=3)).cached
    memory.apply_write(
        "alice", MemoryWrite(key="tea", value="Alice switched to oolong tea"), now=T0 + timedelta(seconds=4)
    )
    fresh = memory.run_query("alice", MemoryQuery(query="tea"), now=T0 + timedelta(seconds=5))
    assert not fresh.cached
    assert fresh.hits[0].memory.value == "Alice switched to oolong tea"
    assert memory.cache.hits == 2
    assert memory.cache.misses == 3


def test_a_candidates_cached_facts_never_make_a_forgotten_memory_visible(memory: MemoryService) -> None:
    """Facts are kept per process by seq; whether a memory may be seen is read from SQL every time."""
    cat = memory.apply_write(
        "alice", MemoryWrite(key="pet", value="Alice's cat is called Tom", entity="Alice"), now=T0
    ).memory_id
    dog = memory.apply_write(
        "alice", MemoryWrite(key="dog", value="Alice's dog is called Rex", entity="Alice"), now=T0
    ).memory_id
    first = memory.run_query("alice", MemoryQuery(query="what is Alice's pet called"), now=T0 + timedelta(seconds=1))
    assert set(ids(first)) == {cat, dog}
    assert len(memory.queries.facts) >= 2  # both candidates' facts are now known to this process
    memory.apply_forget("alice", MemoryForget(memory_id=cat))
    later = memory.run_query("alice", MemoryQuery(query="what is Alice's pet called"), now=T0 + timedelta(seconds=2))
    assert ids(later) == [dog]
    assert later.hits[0].why.entities == ("Alice",)  # the entity stage still reads the cached facts


def test_results_explain_every_stage(memory: MemoryService) -> None:
    memory.apply_write(
        "alice", MemoryWrite(key="tea", value="Alice drinks green tea", source_ids=["turn-1", "turn-2"]), now=T0
    )
    hit = memory.run_query("alice", MemoryQuery(query="green tea", entity=None), now=T0).hits[0]
    assert hit.memory.source_ids == ("turn-1", "turn-2")
    assert hit.why.valid_at == T0
    assert hit.why.dense_rank == 1
    assert hit.why.lexical_rank == 1
    assert hit.why.dense_similarity is not None
    assert hit.why.dense_similarity > 0.5
    assert hit.why.lexical_score is not None
    assert hit.why.lexical_score > 0
    # Alone in its session, the memory gains only its own share of session evidence.
    assert hit.why.stages == ("dense", "lexical", "session")
    assert hit.score == pytest.approx(hit.why.fused + hit.why.session_bonus)


def test_reindex_rebuilds_vectors_from_sql(memory: MemoryService) -> None:
    memory.apply_write("alice", MemoryWrite(key="tea", value="Alice drinks green tea"), now=T0)
    memory.apply_write("bob", MemoryWrite(key="tea", value="Bob drinks black tea"), now=T0)
    memory.index.reset()
    assert memory.index.seqs("alice") == set()
    assert memory.reindex() == 2
    hit = memory.run_query("alice", MemoryQuery(query="beverage in the morning"), now=T0).hits[0]
    assert hit.why.dense_rank == 1
    assert len(memory.index.seqs("bob")) == 1


def test_words_in_most_of_an_owners_memories_do_not_rank_lexically(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    service = MemoryService(database, embedder, index, ranking=RankingPolicy(common_term_docs=2))
    writes = [MemoryWrite(key=f"k{i}", value=f"Alice had tea number {i}") for i in range(3)]
    service.apply_writes("alice", [*writes, MemoryWrite(key="green", value="Alice likes green things")], now=T0)
    service.apply_writes("bob", [MemoryWrite(key="green", value="Bob had a green tea")], now=T0)
    hits = service.run_query("alice", MemoryQuery(query="green tea", top_k=4), now=T0).hits
    lexical = {h.memory.key for h in hits if h.why.lexical_rank is not None}
    # "tea" is in three of alice's memories (over the limit of 2); "green" in one.
    assert lexical == {"green"}
    # Bob's single "tea" memory is not common for bob.
    assert service.run_query("bob", MemoryQuery(query="green tea"), now=T0).hits[0].why.lexical_rank == 1


def test_a_small_owner_is_not_crowded_out_of_full_text_search_by_a_large_one(
    database: Database, embedder: Embedder, index: MilvusMemoryIndex
) -> None:
    service = MemoryService(database, embedder, index, ranking=RankingPolicy(candidates=2, dense_weight=0.0))
    service.apply_writes("bob", [MemoryWrite(key=f"k{i}", value=f"green tea batch {i}") for i in range(20)], now=T0)
    # A long memory ranks below bob's twenty short ones in a search over everyone's memories.
    mine = service.apply_write(
        "alice",
        MemoryWrite(key="tea", value="a long note about the garden, the weather, the neighbours and, once, green tea"),
        now=T0,
    ).memory_id
    hits = service.run_query("alice", MemoryQuery(query="green tea"), now=T0).hits
    assert [h.memory.memory_id for h in hits] == [mine]
    assert hits[0].why.lexical_rank == 1


def test_bad_input_is_an_error_not_a_string(memory: MemoryService) -> None:
    with pytest.raises(InvalidInput, match="owner"):
        memory.apply_write("", MemoryWrite(key="k", value="v"))
    with pytest.raises(InvalidInput, match="owner"):
        memory.run_query("del\x7f", MemoryQuery(query="q"))
    # What a request model refuses never reaches the service: the tools parse their arguments into it.
    with pytest.raises(ValidationError):
        MemoryWrite(key="k", value="nul\x00byte")
    with pytest.raises(ValidationError):
        MemoryQuery(query="q", top_k=0)


def test_a_memory_policy_can_be_tuned(database: object, embedder: object, index: object) -> None:
    service = MemoryService(database, embedder, index, activity=ActivityPolicy(half_life_days=1.0))  # type: ignore[arg-type]
    memory_id = service.apply_write("alice", MemoryWrite(key="k", value="short lived note"), now=T0).memory_id
    assert service.decay_and_archive(T0 + timedelta(days=5)).memory_ids == (memory_id,)


def test_the_service_is_built_from_settings(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path)
    upgrade(settings.sql_url())
    service = build_memory_service(settings)
    try:
        memory_id = service.apply_write(
            "alice", MemoryWrite(key="tea", value="Alice drinks green tea"), now=T0
        ).memory_id
        assert ids(service.run_query("alice", MemoryQuery(query="green tea"), now=T0)) == [memory_id]
        # Only the write's and the query's texts went through the embedder's cache: the expansion's
        # words are kept by the service, and would push those texts out of it.
        assert isinstance(service.embedder, CachedEmbedder)
        assert service.embedder.hits + service.embedder.misses == 2
    finally:
        service.index.client.close()
        service.db.dispose()
