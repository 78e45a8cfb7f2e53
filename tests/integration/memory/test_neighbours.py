"""A conversation's memories are found through the memories told beside them (SQLite and Postgres)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from alembic import command
from sqlalchemy import case, select, update

from cluster.core.ports import Embedder
from cluster.memory.index import MilvusMemoryIndex
from cluster.memory.models import MemoryForget, MemoryObserve, MemoryQuery, MemoryWrite, Turn
from cluster.memory.policy import MemoryScope, RankingPolicy, Ttl
from cluster.memory.service import MemoryService
from cluster.memory.tables import MemoryOwnerRow, MemoryRow
from cluster.storage.db import Database
from cluster.storage.migrate import alembic_config
from tests.integration.memory.conftest import T0

pytestmark = pytest.mark.milvus

TURNS = (
    ("d1", "Melanie: What have you been reading lately?"),
    ("d2", "Caroline: Mostly Becky Chambers, the whole Wayfarers series."),
    ("d3", "Melanie: I loved the first one, the long way to a small angry planet!"),
)


@pytest.fixture
def lexical(database: Database, embedder: Embedder, index: MilvusMemoryIndex) -> MemoryService:
    """Words alone decide: what a query finds is what the full-text documents hold."""
    policy = RankingPolicy(
        dense_weight=0.0, entity_boost=0.0, time_boost=0.0, when_boost=0.0, session_weight=0.0, expansion_weight=0.0
    )
    return MemoryService(database, embedder, index, ranking=policy)


def found(memory: MemoryService, owner: str, query: str) -> list[str]:
    return sorted(
        hit.memory.key
        for hit in memory.run_query(owner, MemoryQuery(query=query, top_k=10), now=T0 + timedelta(days=1)).hits
    )


def contexts(database: Database, owner: str) -> dict[str, str | None]:
    with database.read() as session:
        rows = session.execute(select(MemoryRow.key, MemoryRow.context).where(MemoryRow.owner == owner))
        return dict(rows.all())  # type: ignore[arg-type]


def turn(key: str, text: str, conversation: str = "c1", **fields: object) -> MemoryWrite:
    return MemoryWrite(key=key, value=text, metadata={"session_id": conversation}, **fields)  # type: ignore[arg-type]


def test_a_turn_is_found_by_the_words_of_the_turns_told_beside_it(lexical: MemoryService, database: Database) -> None:
    for key, text in TURNS:
        lexical.apply_write("alice", turn(key, text), now=T0)
    lexical.apply_write("alice", turn("e1", "Bob: The gutters need cleaning", conversation="c2"), now=T0)
    # "reading" is only d1's word, "Wayfarers" only d2's: each finds the turns beside it too.
    assert found(lexical, "alice", "what has she been reading") == ["d1", "d2"]
    assert found(lexical, "alice", "Wayfarers series") == ["d1", "d2", "d3"]
    # Another conversation's turn, written right after, is no neighbour.
    assert found(lexical, "alice", "gutters") == ["e1"]
    # Written in one batch, the turns get the same neighbours as written one call each.
    lexical.apply_writes("bob", [turn(key, text) for key, text in TURNS], now=T0)
    alice = {k: v for k, v in contexts(database, "alice").items() if k != "e1"}
    assert contexts(database, "bob") == alice
    assert alice["d2"] == f"{TURNS[0][1]}\n{TURNS[2][1]}"


def test_forgetting_a_turn_takes_its_words_out_of_its_neighbours(lexical: MemoryService) -> None:
    written = [lexical.apply_write("alice", turn(key, text), now=T0) for key, text in TURNS]
    assert found(lexical, "alice", "Becky Chambers") == ["d1", "d2", "d3"]
    lexical.apply_forget("alice", MemoryForget(memory_id=written[1].memory_id))
    assert found(lexical, "alice", "Becky Chambers") == []
    # d1 and d3 are now each other's neighbours.
    assert found(lexical, "alice", "small angry planet") == ["d1", "d3"]


def test_a_batch_that_also_changes_a_memory_links_its_turns_as_one_call_a_turn_would(
    lexical: MemoryService, database: Database
) -> None:
    writes = [turn("d1", TURNS[0][1]), turn("k", "Alice: the flat is now blue"), turn("d2", TURNS[1][1])]
    for owner in ("alice", "bob"):
        lexical.apply_write(owner, turn("k", "Alice: the flat is green"), now=T0)
    lexical.apply_writes("alice", writes, now=T0 + timedelta(hours=1))
    for write in writes:
        lexical.apply_write("bob", write, now=T0 + timedelta(hours=1))
    # d1's next neighbour is d2 both ways: the new version of k in between keeps out of the
    # conversation. (d1's previous one differs: in the batch, k's first version was still current.)
    for owner in ("alice", "bob"):
        stored = contexts(database, owner)
        assert (stored["d1"] or "").split("\n")[-1] == TURNS[1][1]
        assert stored["d2"] == TURNS[0][1]
    assert contexts(database, "alice")["d1"] == f"Alice: the flat is green\n{TURNS[1][1]}"


def test_a_forget_also_reaches_a_neighbour_superseded_since(lexical: MemoryService) -> None:
    written = [lexical.apply_write("alice", turn(key, text), now=T0) for key, text in TURNS]
    # d2's first version held d3's words; a new version of d2 supersedes it but history still searches it.
    lexical.apply_write("alice", turn("d2", "Caroline: Mostly Ursula Le Guin."), now=T0 + timedelta(hours=1))
    lexical.apply_forget("alice", MemoryForget(memory_id=written[2].memory_id))
    history = lexical.run_query(
        "alice", MemoryQuery(query="small angry planet", include_history=True), now=T0 + timedelta(days=1)
    )
    assert history.hits == ()


def test_purging_an_expired_turn_takes_its_words_out_of_its_neighbours(
    lexical: MemoryService, database: Database
) -> None:
    lexical.apply_write("alice", turn(*TURNS[0]), now=T0)
    lexical.apply_write("alice", turn(*TURNS[1], ttl=Ttl.window(3600)), now=T0)
    lexical.apply_write("alice", turn(*TURNS[2]), now=T0)
    assert lexical.purge_expired(T0 + timedelta(hours=2), owner="alice").changed == 1
    assert contexts(database, "alice") == {"d1": TURNS[2][1], "d3": TURNS[0][1]}


def test_an_expired_turn_is_no_later_turns_neighbour_and_a_forget_reaches_past_it(
    lexical: MemoryService, database: Database
) -> None:
    written = lexical.apply_write("alice", turn(*TURNS[0]), now=T0)
    lexical.apply_write("alice", turn(*TURNS[1], ttl=Ttl.window(3600)), now=T0)
    lexical.apply_write("alice", turn(*TURNS[2]), now=T0 + timedelta(hours=2))
    stored = contexts(database, "alice")
    # d2 had expired when d3 came: d1 and d3 are each other's neighbours.
    assert stored["d3"] == TURNS[0][1]
    assert stored["d1"] == TURNS[2][1]
    # d3 holds d1's words past the expired d2: forgetting d1 reaches it.
    lexical.apply_forget("alice", MemoryForget(memory_id=written.memory_id))
    assert found(lexical, "alice", "reading lately") == []


def test_sent_context_is_kept_and_an_empty_one_stores_none(lexical: MemoryService, database: Database) -> None:
    lexical.apply_write("alice", turn("d1", TURNS[0][1]), now=T0)
    lexical.apply_write("alice", turn("d2", TURNS[1][1], context="a question about science fiction"), now=T0)
    lexical.apply_write("alice", turn("d3", TURNS[2][1], context=""), now=T0)
    stored = contexts(database, "alice")
    assert stored["d2"] == "a question about science fiction"
    assert stored["d3"] == ""
    # d1's neighbour is d2 whatever d2's own context is.
    assert stored["d1"] == TURNS[1][1]
    assert found(lexical, "alice", "science fiction") == ["d2"]
    assert found(lexical, "alice", "angry planet") == ["d3"]


def test_a_session_scope_is_a_conversation_and_other_owners_are_never_neighbours(
    lexical: MemoryService, database: Database
) -> None:
    scope = MemoryScope.session("s-1")
    lexical.apply_write("alice", MemoryWrite(key="k1", value=TURNS[0][1], scope=scope, ttl=Ttl.session()), now=T0)
    lexical.apply_write("bob", MemoryWrite(key="k1", value="Bob: nothing to do with it", scope=scope), now=T0)
    lexical.apply_write("alice", MemoryWrite(key="k2", value=TURNS[1][1], scope=scope, ttl=Ttl.session()), now=T0)
    assert contexts(database, "alice") == {"k1": TURNS[1][1], "k2": TURNS[0][1]}
    assert contexts(database, "bob") == {"k1": None}
    # A memory of no conversation has no neighbours.
    lexical.apply_write("alice", MemoryWrite(key=f"note-{uuid.uuid4().hex[:6]}", value="Alice likes tea"), now=T0)
    assert None in contexts(database, "alice").values()


def test_a_new_version_keeps_out_of_the_conversation(lexical: MemoryService, database: Database) -> None:
    for key, text in TURNS:
        lexical.apply_write("alice", turn(key, text), now=T0)
    lexical.apply_write("alice", turn("d2", "Caroline: Mostly Ursula Le Guin these days."), now=T0 + timedelta(hours=1))
    with database.read() as session:
        rows = session.execute(
            select(MemoryRow.key, MemoryRow.version, MemoryRow.context).where(MemoryRow.owner == "alice")
        ).all()
    stored = {(key, version): context for key, version, context in rows}
    # The new version has no neighbours, and the last turn did not gain it as one.
    assert stored[("d2", 2)] is None
    assert stored[("d3", 1)] == TURNS[1][1]
    assert found(lexical, "alice", "Ursula Le Guin") == ["d2"]


def test_an_upgrade_links_the_conversations_of_memories_written_before_0011(
    lexical: MemoryService, database: Database
) -> None:
    note = turn("n1", "Alice: tea, always tea", context="what she drinks")
    for owner in ("alice", "bob"):
        for key, text in TURNS[:2]:
            lexical.apply_write(owner, turn(key, text), now=T0)
        lexical.apply_write(owner, note, now=T0)
    # Alice's rows as 0011 found them: no conversation, no derived context (a sent one is kept).
    with database.transaction() as session:
        session.execute(
            update(MemoryRow)
            .where(MemoryRow.owner == "alice")
            .values(
                thread=None,
                context_derived=False,
                context=case((MemoryRow.context_derived, None), else_=MemoryRow.context),
            )
        )
    assert contexts(database, "alice") == {"d1": None, "d2": None, "n1": "what she drinks"}
    # A turn written after 0011, before the upgrade: its earlier turns are no neighbours yet.
    for owner in ("alice", "bob"):
        lexical.apply_write(owner, turn(*TURNS[2]), now=T0 + timedelta(hours=1))
    assert contexts(database, "alice")["d3"] is None
    assert found(lexical, "alice", "always tea") == ["n1"]
    before = generation(database, "alice")
    config = alembic_config(database.url)
    command.downgrade(config, "0011_memory_threads")
    command.upgrade(config, "head")
    # Every context is what the writes would have made had 0011 come first.
    assert contexts(database, "alice") == contexts(database, "bob")
    assert contexts(database, "alice")["d3"] == note.value
    assert generation(database, "alice") == before + 1
    # n1 kept its writer's context, and is its neighbours' neighbour.
    assert found(lexical, "alice", "always tea") == ["d2", "d3", "n1"]


def test_the_upgrade_passes_over_a_memory_expired_by_then(lexical: MemoryService, database: Database) -> None:
    two_years = 2 * 365 * 24 * 3600
    lexical.apply_write("alice", turn(*TURNS[0], ttl=Ttl.window(two_years)), now=T0)
    lexical.apply_write("alice", turn(*TURNS[1], ttl=Ttl.window(3600)), now=T0)
    lexical.apply_write("alice", turn(*TURNS[2]), now=T0)
    with database.transaction() as session:
        session.execute(update(MemoryRow).values(thread=None, context_derived=False, context=None))
    config = alembic_config(database.url)
    command.downgrade(config, "0011_memory_threads")
    command.upgrade(config, "head")
    # At the upgrade d2 has expired and d1 has not: d1 and d3 are each other's neighbours.
    assert contexts(database, "alice") == {
        "d1": TURNS[2][1],
        "d2": f"{TURNS[0][1]}\n{TURNS[2][1]}",
        "d3": TURNS[0][1],
    }


def test_a_conversation_id_longer_than_a_column_links_its_turns(lexical: MemoryService, database: Database) -> None:
    # Metadata is free-form: an id of any length is accepted, and two long ids stay apart.
    long_a, long_b = "a" * 300, "a" * 299 + "b"
    for key, text in TURNS[:2]:
        lexical.apply_write("alice", turn(key, text, conversation=long_a), now=T0)
    lexical.apply_write("alice", turn("e1", "Bob: The gutters need cleaning", conversation=long_b), now=T0)
    assert contexts(database, "alice") == {"d1": TURNS[1][1], "d2": TURNS[0][1], "e1": None}


def generation(database: Database, owner: str) -> int:
    with database.read() as session:
        return session.execute(select(MemoryOwnerRow.generation).where(MemoryOwnerRow.owner == owner)).scalar_one()


def test_a_promoted_turn_is_found_by_the_turns_logged_beside_it(lexical: MemoryService, database: Database) -> None:
    # Only Caroline's answer is promoted; the log holds the question it answers and the reply it got.
    for i, (_, text) in enumerate(TURNS):
        speaker, said = text.split(": ", 1)
        lexical.apply_observe(
            "alice",
            MemoryObserve(session_id="s1", turn=Turn(speaker=speaker, text=said, at=T0 + timedelta(minutes=i))),
            now=T0,
        )
    lexical.apply_observe(
        "alice",
        MemoryObserve(
            session_id="s2", turn=Turn(text="Another Becky Chambers, the Wayfarers again", at=T0 + timedelta(days=2))
        ),
    )
    report = lexical.reevaluate("alice", now=T0 + timedelta(days=2, minutes=1))
    answer = lexical.get("alice", report.memory_ids[0])
    assert answer.value == TURNS[1][1]
    assert contexts(database, "alice")[answer.key] == f"{TURNS[0][1]}\n{TURNS[2][1]}"
    # "reading" is only the question's word: the promoted answer is found by it.
    hits = lexical.run_query(
        "alice", MemoryQuery(query="what has she been reading", top_k=10), now=T0 + timedelta(days=3)
    ).hits
    assert [h.memory.memory_id for h in hits] == [answer.memory_id]


def test_a_turn_promoted_as_it_is_logged_is_found_by_the_turn_before_it(
    lexical: MemoryService, database: Database
) -> None:
    lexical.apply_observe(
        "alice",
        MemoryObserve(session_id="s1", turn=Turn(speaker="Melanie", text="Where do you live these days?", at=T0)),
        now=T0,
    )
    moved = lexical.apply_observe(
        "alice", MemoryObserve(session_id="s1", turn=Turn(speaker="Caroline", text="I moved to Berlin", at=T0)), now=T0
    )
    assert moved.promoted is not None
    assert contexts(database, "alice")[moved.key] == "Melanie: Where do you live these days?"
    hits = lexical.run_query(
        "alice", MemoryQuery(query="where does Caroline live these days", top_k=10), now=T0 + timedelta(hours=1)
    ).hits
    assert [h.memory.memory_id for h in hits] == [moved.promoted.memory_id]
