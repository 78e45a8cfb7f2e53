"""Word vectors kept in SQL, so a word is embedded once for the whole deployment.

Query expansion needs a vector for every word of an owner's memories. Embedding them is the costly
part (~1-3 ms a word: a fresh process's first query of an owner with 100k memories embedded 3.5k
words in ~10 s); reading them is not. Every process reads the words others embedded before it
embeds one itself, and hands what it embedded to a writer thread, off the query's path. A lost or
failed write costs only a later embedding: the same word and embedder give the same vector.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
from collections.abc import Mapping, Sequence

import numpy as np
from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from cluster.memory.tables import WordVectorRow
from cluster.storage.db import Database

logger = logging.getLogger(__name__)

#: Words a statement reads or writes at most (SQLite allows 32,766 bound parameters).
CHUNK = 500
#: Stored vectors' layout: float32, little-endian.
LAYOUT = np.dtype("<f4")


class SharedWordVectors:
    """The ``word_vectors`` rows of one embedder (``embedder``: its identity, e.g.
    :func:`cluster.embedding.factory.embedder_identity`; stored as a digest)."""

    def __init__(self, database: Database, embedder: str) -> None:
        self.db = database
        self.key = hashlib.sha256(embedder.encode()).hexdigest()[:32]
        insert = postgresql.insert if database.dialect == "postgresql" else sqlite.insert
        self._insert = insert(WordVectorRow).on_conflict_do_nothing()
        self._pending: queue.Queue[list[dict[str, object]]] = queue.Queue()
        self._writer: threading.Thread | None = None
        self._start = threading.Lock()

    def read(self, session: Session, words: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored vectors among ``words``, in the caller's unit of work."""
        names: list[str] = []
        blobs: list[bytes] = []
        for i in range(0, len(words), CHUNK):
            stmt = select(WordVectorRow.word, WordVectorRow.vector).where(
                WordVectorRow.embedder == self.key, WordVectorRow.word.in_(words[i : i + CHUNK])
            )
            for word, blob in session.execute(stmt):
                names.append(word)
                blobs.append(blob)
        if not names:
            return {}
        # One buffer for all of them: a first query of an owner reads thousands of words.
        rows = np.frombuffer(b"".join(blobs), dtype=LAYOUT).reshape(len(names), -1)
        return dict(zip(names, rows, strict=True))

    def drop_others(self) -> int:
        """Delete the words other embedders stored (after this one rebuilt the vectors); returns how many."""
        with self.db.transaction() as session:
            gone = session.execute(delete(WordVectorRow).where(WordVectorRow.embedder != self.key))
        return int(getattr(gone, "rowcount", 0) or 0)

    def save(self, vectors: Mapping[str, np.ndarray]) -> None:
        """Store ``vectors`` (a word already stored keeps its row) on the writer thread; returns at once.

        The writer takes whatever is waiting into one transaction: on SQLite, queries that each embed
        a new word must not each queue for the write lock.
        """
        rows: list[dict[str, object]] = [
            {"embedder": self.key, "word": w, "vector": v.astype(LAYOUT).tobytes()} for w, v in vectors.items()
        ]
        if not rows:
            return
        with self._start:
            if self._writer is None:
                # A daemon: words not written when the process ends are embedded again by another.
                self._writer = threading.Thread(target=self._write_forever, name="word-vectors", daemon=True)
                self._writer.start()
        self._pending.put(rows)

    def _write_forever(self) -> None:
        while True:
            batches = [self._pending.get()]
            while not self._pending.empty():
                batches.append(self._pending.get_nowait())
            rows: dict[object, dict[str, object]] = {}
            for batch in batches:
                for row in batch:
                    rows.setdefault(row["word"], row)  # the first, as the table keeps the first
            try:
                self._write(list(rows.values()))
            finally:
                for _ in batches:
                    self._pending.task_done()

    def _write(self, rows: list[dict[str, object]]) -> None:
        try:
            with self.db.transaction() as session:
                for i in range(0, len(rows), CHUNK):
                    session.execute(self._insert, rows[i : i + CHUNK])
        except SQLAlchemyError as exc:
            logger.warning("could not store %d word vectors (they will be embedded again): %s", len(rows), exc)

    def wait(self) -> None:
        """Until every save handed over so far is written (tests, and a process shutting down)."""
        self._pending.join()
