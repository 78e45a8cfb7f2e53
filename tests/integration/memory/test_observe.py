"""The raw log on SQLite and Postgres: state changes supersede, retried turns count once, sessions end."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from pydantic import ValidationError

from cluster.memory.models import MemoryObserve, MemoryQuery, MemoryUpdate, ObserveResult, SessionEnd, Turn
from cluster.memory.policy import MemoryState
from cluster.memory.service import MemoryService
from tests.integration.memory.conftest import T0

pytestmark = pytest.mark.milvus


def stored(result: ObserveResult) -> uuid.UUID:
    assert result.promoted is not None
    return result.promoted.memory_id


def test_a_second_state_change_of_the_same_thing_supersedes_the_first(memory: MemoryService) -> None:
    berlin = memory.apply_observe("alice", MemoryObserve(session_id="s1", turn=Turn(text="I moved to Berlin")), now=T0)
    paris = memory.apply_observe(
        "alice",
        MemoryObserve(session_id="s1", turn=Turn(text="We moved to Paris last week")),
        now=T0 + timedelta(hours=1),
    )
    assert berlin.key == paris.key == "state:user:moved"
    assert paris.promoted is not None
    assert paris.promoted.version == 2
    assert paris.promoted.superseded_id == stored(berlin)
    later = T0 + timedelta(hours=2)
    current = memory.run_query("alice", MemoryQuery(query="where does the user live", top_k=10), now=later)
    assert [h.memory.value for h in current.hits] == ["user: We moved to Paris last week"]
    history = memory.run_query(
        "alice", MemoryQuery(query="where does the user live", top_k=10, include_history=True), now=later
    )
    states = {h.memory.value: h.memory.state for h in history.hits}
    assert states == {
        "user: I moved to Berlin": MemoryState.SUPERSEDED,
        "user: We moved to Paris last week": MemoryState.CURRENT,
    }
    # The session's end expires both versions, and counts the one memory that was current.
    assert memory.apply_end_session("alice", SessionEnd(session_id="s1"), now=later).expired == 1
    after = T0 + timedelta(hours=3)
    assert (
        memory.run_query("alice", MemoryQuery(query="where does the user live", include_history=True), now=after).hits
        == ()
    )


def test_state_changes_of_different_things_both_stay_current(memory: MemoryService) -> None:
    db = memory.apply_observe(
        "alice", MemoryObserve(session_id="s1", turn=Turn(text="We switched the database to Postgres")), now=T0
    )
    ci = memory.apply_observe(
        "alice", MemoryObserve(session_id="s1", turn=Turn(text="We switched the CI to GitHub Actions")), now=T0
    )
    assert db.key != ci.key
    found = memory.run_query("alice", MemoryQuery(query="what did we switch", top_k=10), now=T0)
    assert {h.memory.memory_id for h in found.hits} == {stored(db), stored(ci)}


def test_a_retried_turn_is_logged_and_stored_once(memory: MemoryService) -> None:
    turn = Turn(text="I moved to Berlin", at=T0)
    first = memory.apply_observe("alice", MemoryObserve(session_id="s1", turn=turn), now=T0)
    again = memory.apply_observe("alice", MemoryObserve(session_id="s1", turn=turn), now=T0 + timedelta(seconds=5))
    assert not first.repeated
    assert again.repeated
    assert again.log_id == first.log_id
    assert again.promoted is not None
    assert (again.promoted.memory_id, again.promoted.version) == (stored(first), 1)
    assert (again.reason, again.key) == (first.reason, first.key)
    history = memory.run_query(
        "alice", MemoryQuery(query="Berlin", top_k=10, include_history=True), now=T0 + timedelta(minutes=1)
    )
    assert [h.memory.memory_id for h in history.hits] == [stored(first)]
    # After an update the retry still names what the first call stored: version 1, superseded now.
    memory.apply_update(
        "alice", MemoryUpdate(memory_id=stored(first), value="I moved to Berlin-Mitte", metadata={"checked": True})
    )
    late = memory.apply_observe("alice", MemoryObserve(session_id="s1", turn=turn), now=T0 + timedelta(seconds=9))
    assert late.promoted is not None
    assert (late.repeated, late.promoted.memory_id, late.reason) == (True, stored(first), first.reason)
    # A raw turn sent again is not a second turn that refers back to it.
    chat = Turn(text="My daughter Alma starts violin lessons in Porto")
    memory.apply_observe("alice", MemoryObserve(session_id="s1", turn=chat), now=T0)
    assert memory.apply_observe(
        "alice", MemoryObserve(session_id="s1", turn=chat), now=T0 + timedelta(hours=3)
    ).repeated
    assert memory.reevaluate("alice", now=T0 + timedelta(hours=4)).changed == 0


def test_the_same_turn_sent_twice_at_once_is_logged_once(memory: MemoryService) -> None:
    turn = Turn(text="The deploy target is now staging", at=T0)
    results: list[ObserveResult] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def send() -> None:
        start.wait()
        try:
            results.append(memory.apply_observe("alice", MemoryObserve(session_id="s1", turn=turn), now=T0))
        except BaseException as exc:  # collected: an error in a thread must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(r.repeated for r in results) == [False, True]
    assert len({stored(r) for r in results}) == 1
    history = memory.run_query(
        "alice", MemoryQuery(query="deploy target", include_history=True), now=T0 + timedelta(minutes=1)
    )
    assert len(history.hits) == 1


def test_ending_a_session_expires_its_state_and_keeps_explicit_memories(memory: MemoryService) -> None:
    state = memory.apply_observe(
        "alice", MemoryObserve(session_id="s1", turn=Turn(text="The build is now green")), now=T0
    )
    fact = memory.apply_observe(
        "alice", MemoryObserve(session_id="s1", turn=Turn(text="Remember that the build server is in Porto")), now=T0
    )
    other = memory.apply_observe(
        "alice", MemoryObserve(session_id="s2", turn=Turn(text="The build is now red")), now=T0
    )
    ended = memory.apply_end_session("alice", SessionEnd(session_id="s1"), now=T0 + timedelta(hours=1))
    assert (ended.session_id, ended.expired) == ("s1", 1)
    left = memory.run_query("alice", MemoryQuery(query="build", top_k=10), now=T0 + timedelta(hours=2))
    assert {h.memory.memory_id for h in left.hits} == {stored(fact), stored(other)}
    assert stored(state) not in {h.memory.memory_id for h in left.hits}
    assert memory.apply_end_session("alice", SessionEnd(session_id="s1"), now=T0 + timedelta(hours=3)).expired == 0
    # Another owner's session of the same name is not theirs to end.
    assert memory.apply_end_session("bob", SessionEnd(session_id="s2"), now=T0 + timedelta(hours=3)).expired == 0


@pytest.mark.parametrize("session_id", ["", "s" * 201, "s\x00"])
def test_a_bad_session_id_is_refused_naming_the_field(session_id: str) -> None:
    # The tools parse their arguments into these models: a bad session id never reaches the service.
    with pytest.raises(ValidationError, match="session_id"):
        MemoryObserve(session_id=session_id, turn=Turn(text="hello"))
    with pytest.raises(ValidationError, match="session_id"):
        SessionEnd(session_id=session_id)
