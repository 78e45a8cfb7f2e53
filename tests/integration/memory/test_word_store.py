"""Word vectors shared through SQL (SQLite and Postgres): written off the caller's path, read back exactly."""

from __future__ import annotations

import numpy as np

from cluster.memory.word_store import SharedWordVectors
from cluster.storage.db import Database


def vec(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_saved_words_are_read_back_exactly_and_a_stored_word_keeps_its_first_vector(database: Database) -> None:
    store = SharedWordVectors(database, "model a")
    for i in range(20):  # many small saves, as queries make them: the writer takes what waits together
        store.save({f"word{i}": vec(1.0, i, 0.5), "shared": vec(1.0, 0.0, 0.0)})
    store.save({"shared": vec(0.0, 1.0, 0.0)})
    store.wait()
    with database.read() as session:
        found = store.read(session, [f"word{i}" for i in range(20)] + ["shared", "missing"])
    assert set(found) == {f"word{i}" for i in range(20)} | {"shared"}
    assert np.array_equal(found["word7"], vec(1.0, 7, 0.5))
    assert np.array_equal(found["shared"], vec(1.0, 0.0, 0.0))


def test_another_embedders_words_are_not_read(database: Database) -> None:
    mine, theirs = SharedWordVectors(database, "model a"), SharedWordVectors(database, "model b")
    theirs.save({"puppy": vec(0.0, 0.0, 1.0)})
    theirs.wait()
    with database.read() as session:
        assert mine.read(session, ["puppy"]) == {}
        assert set(theirs.read(session, ["puppy"])) == {"puppy"}


def test_reads_and_writes_of_more_words_than_one_statement_holds(database: Database) -> None:
    store = SharedWordVectors(database, "model a")
    words = {f"w{i:04d}": vec(1.0, i % 7, i % 5) for i in range(1_234)}
    store.save(words)
    store.wait()
    with database.read() as session:
        found = store.read(session, list(words))
    assert len(found) == len(words)
    assert all(np.array_equal(found[w], v) for w, v in words.items())


def test_a_full_rebuild_drops_the_words_of_other_embedders(database: Database) -> None:
    old, new = SharedWordVectors(database, "model a"), SharedWordVectors(database, "model b")
    old.save({"puppy": vec(0.0, 0.0, 1.0), "shelter": vec(0.0, 1.0, 0.0)})
    new.save({"puppy": vec(1.0, 0.0, 0.0)})
    old.wait()
    new.wait()
    assert new.drop_others() == 2
    with database.read() as session:
        assert old.read(session, ["puppy", "shelter"]) == {}
        assert set(new.read(session, ["puppy"])) == {"puppy"}
