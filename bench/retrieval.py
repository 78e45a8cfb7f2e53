"""What the conversation retrieval benchmarks share (``bench.locomo``, ``bench.longmemeval``).

A corpus is a set of turns with ids, searched by its own questions: the baselines (BM25, dense
MiniLM, their reciprocal-rank fusion) and the memory service rank a question's turns the same way
for every benchmark, and a benchmark only says how it reads its data and what it scores.

    Ranker = (corpus, question index) -> turn ids, best first
"""

from __future__ import annotations

import hashlib
import itertools
import re
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from rank_bm25 import BM25Okapi

from cluster.core.ports import Embedder
from cluster.embedding import OnnxMiniLMEmbedder
from cluster.memory.index import MilvusMemoryIndex
from cluster.memory.models import MemoryQuery
from cluster.memory.policy import MemoryLimits, RankingPolicy
from cluster.memory.repository.versions import Versions
from cluster.memory.service import MemoryService
from cluster.storage.db import Database
from cluster.storage.migrate import upgrade
from cluster.storage.milvus import open_milvus


class Turn(Protocol):
    @property
    def dia_id(self) -> str: ...
    @property
    def item_text(self) -> str: ...


class Asked(Protocol):
    @property
    def question(self) -> str: ...


class Corpus(Protocol):
    """One owner's turns and the questions asked of them."""

    @property
    def sample_id(self) -> str: ...
    @property
    def turns(self) -> Sequence[Turn]: ...
    @property
    def questions(self) -> Sequence[Asked]: ...


Ranker = Callable[[Corpus, int], list[str]]


def tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def bm25_ranker(corpora: Sequence[Corpus]) -> Ranker:
    """Plain BM25 (rank_bm25, ``\\w+`` lower-case tokens) over each corpus's turns."""
    indexes = {c.sample_id: BM25Okapi([tokens(t.item_text) for t in c.turns]) for c in corpora}

    def rank(corpus: Corpus, qi: int) -> list[str]:
        scores = indexes[corpus.sample_id].get_scores(tokens(corpus.questions[qi].question))
        return [corpus.turns[i].dia_id for i in np.argsort(-scores, kind="stable")[:100]]

    return rank


def dense_ranker(corpora: Sequence[Corpus], embedder: Embedder, text_of: Callable[[Turn], str] | None = None) -> Ranker:
    """Cosine similarity of the same MiniLM vectors, every turn scored; ``text_of`` is what a turn's
    vector is made of (default its ``item_text``)."""
    read = text_of or (lambda t: t.item_text)
    vectors = {c.sample_id: np.asarray(embedder.embed([read(t) for t in c.turns])) for c in corpora}
    questions = {
        c.sample_id: np.asarray(embedder.embed([q.question for q in c.questions])) if c.questions else None
        for c in corpora
    }

    def rank(corpus: Corpus, qi: int) -> list[str]:
        q = questions[corpus.sample_id]
        assert q is not None
        scores = vectors[corpus.sample_id] @ q[qi]
        return [corpus.turns[i].dia_id for i in np.argsort(-scores, kind="stable")[:100]]

    return rank


def rrf_ranker(first: Ranker, second: Ranker, k: float = 60.0) -> Ranker:
    def rank(corpus: Corpus, qi: int) -> list[str]:
        fused: dict[str, float] = defaultdict(float)
        for ranking in (first(corpus, qi), second(corpus, qi)):
            for r, dia_id in enumerate(ranking):
                fused[dia_id] += 1.0 / (k + r + 1)
        return sorted(fused, key=lambda d: -fused[d])

    return rank


def memory_ranker(
    service: MemoryService,
    owner_suffix: str = "",
    *,
    now: Callable[[Corpus, int], datetime | None] | None = None,
) -> Ranker:
    """The memory service's top 10 keys; ``now`` gives a question's own time (``MemoryQuery.now``)."""

    def rank(corpus: Corpus, qi: int) -> list[str]:
        at = now(corpus, qi) if now is not None else None
        request = MemoryQuery(query=corpus.questions[qi].question, top_k=10, now=at)
        return [hit.memory.key for hit in service.run_query(corpus.sample_id + owner_suffix, request).hits]

    return rank


# ------------------------------------------------------------------------------------- the service


def policies(grid: dict[str, tuple[Any, ...]]) -> Iterator[RankingPolicy]:
    """Every policy of a grid of ``RankingPolicy`` constants (the others at their defaults)."""
    names = list(grid)
    for values in itertools.product(*(grid[n] for n in names)):
        yield RankingPolicy(**dict(zip(names, values, strict=True)))


def keys_of(service: MemoryService, owner: str) -> dict[int, str]:
    """An owner's memory keys by ``seq``, as ranked candidates name them."""
    with service.db.read() as session:
        rows = Versions(session, owner, service.db.dialect).all_rows(-1, 1_000_000)
        return {m.seq: m.record.key for m in rows}


@dataclass
class Memory:
    """A memory service over a temporary SQLite file (or ``database_url``) and Milvus Lite."""

    database: Database
    embedder: Embedder
    index: MilvusMemoryIndex
    service: MemoryService
    reused: bool = False
    """The stores held a previous run's writes (``open_memory(keep=...)``)."""

    def variant(self, ranking: RankingPolicy) -> MemoryService:
        """The same memories ranked under another policy."""
        return MemoryService(
            self.database, self.embedder, self.index, ranking=ranking, embedder_name=self.service.embedder_name
        )


@contextmanager
def open_memory(
    collection: str,
    *,
    database_url: str | None = None,
    embedder: Embedder | None = None,
    fp32: bool = False,
    keep: Path | None = None,
    limits: MemoryLimits | None = None,
) -> Iterator[Memory]:
    """The stores in a temporary directory, or in ``keep``: kept after the run, and opened as they
    are when they already hold a run's writes (``Memory.reused``), to rank them again without writing."""
    with tempfile.TemporaryDirectory(prefix=f"{collection}-") as tmp:
        where = keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        reused = (where / "memory.db").exists() and database_url is None
        url = database_url or f"sqlite:///{where / 'memory.db'}"
        upgrade(url)
        database = Database(url)
        milvus = open_milvus(str(where / "milvus.db"))
        if embedder is None:
            embedder = OnnxMiniLMEmbedder(threads=1, quantized=not fp32)
            embedder.embed(["warm up"])
        index = MilvusMemoryIndex(milvus, dimension=embedder.dimension, collection=collection)
        if not reused:
            index.reset()
        try:
            # Named as a deployment names it: the owners' words are then shared through SQL, not per service.
            service = MemoryService(database, embedder, index, limits=limits, embedder_name=f"bench:{collection}")
            yield Memory(database, embedder, index, service, reused)
        finally:
            milvus.close()
            database.dispose()


class StoredVectors:
    """An embedder whose vectors are kept in a file between runs: the same model's vectors, computed
    once per text (a LongMemEval run embeds ~45k turns; a second run of the bench embeds none).

    Texts are keyed by their SHA-1; :meth:`save` writes the file (``.npz``) when new texts were embedded.
    A call with one text, as a query makes, always goes to the model: a query's embedding stays timed.
    """

    def __init__(self, model: Embedder, path: Path | None) -> None:
        self.model = model
        self.path = path
        self.vectors: dict[str, np.ndarray] = {}
        self.added = 0
        if path is not None and path.exists():
            with np.load(path) as stored:
                self.vectors = dict(zip(stored["keys"].tolist(), stored["vectors"], strict=True))

    @property
    def dimension(self) -> int:
        return self.model.dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if len(texts) == 1:
            return self.model.embed(texts)
        keys = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
        missing = list(dict.fromkeys((k, t) for k, t in zip(keys, texts, strict=True) if k not in self.vectors))
        if missing:
            computed = self.model.embed([t for _, t in missing])
            for (key, _), vector in zip(missing, computed, strict=True):
                self.vectors[key] = np.asarray(vector, dtype=np.float32)
            self.added += len(missing)
        return [self.vectors[k].tolist() for k in keys]

    def save(self) -> None:
        if self.path is None or not self.added:
            return
        keys = np.array(list(self.vectors))
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=keys, vectors=np.stack(list(self.vectors.values())))
        tmp.replace(self.path)
        self.added = 0
