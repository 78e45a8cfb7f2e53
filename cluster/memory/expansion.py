"""Query expansion from the owner's own words: no thesaurus, no model beyond the memory embedder.

A question often names a thing by another word than the memory that answers it: "What activities
does Melanie partake in?" is answered by "we went camping" and "I took up pottery", which share no
word with it. For each content word of a query, the words of the owner's own memories nearest to it
in the embedder's space (each word embedded alone) stand in for it: the candidates whose text holds
them form a third, weaker ranking beside the dense and lexical ones (:mod:`cluster.memory.ranking`).

Only the owner's words are candidates, so an expansion always matches something the owner said,
and only words a stored memory still holds are chosen: what a caller sees depends on the stored
rows and the embedder, never on which process answered. Each process keeps a word's vector once (it
depends on the word alone) and each owner's words, grown from the rows written since it last looked,
like the entity vocabulary.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Sequence

import numpy as np

from cluster.memory.growth import PerOwner
from cluster.memory.policy.words import STOPWORDS

#: Words of three or more letters; digits, ids and one- or two-letter words are no topic.
_WORD = re.compile(r"[^\W\d_]{3,}(?:['’][^\W\d_]+)?")
_POSSESSIVE = re.compile(r"['’]s$")
#: A neighbour that starts like the word it expands is its inflection: the lexical stage (stemmed) matches it already.
SAME_STEM = 4

Embed = Callable[[list[str]], Sequence[Sequence[float]]]
#: Stored vectors of some words (those it has); and the keeper of freshly embedded ones.
Read = Callable[[list[str]], dict[str, np.ndarray]]
Save = Callable[[dict[str, np.ndarray]], object]
#: Longer runs of letters are no words (and a stored word has at most this many characters).
MAX_WORD = 64


def content_words(text: str) -> list[str]:
    """Lower-case words of ``text`` that can carry a topic, possessives removed, in order, once each."""
    out: dict[str, None] = {}
    for word in dict.fromkeys(_WORD.findall(text.lower())):
        if "'" in word or "’" in word:
            word = _POSSESSIVE.sub("", word)
        if 3 <= len(word) <= MAX_WORD and word not in STOPWORDS:
            out[word] = None
    return list(out)


def words_of(texts: Iterable[str]) -> list[str]:
    """``content_words`` of all the texts together, in the same order, reading each distinct
    whitespace-separated token once (no word spans whitespace): a term space reads every memory of
    an owner through here, and an owner's texts repeat their tokens many times over."""
    out: dict[str, None] = {}
    for token in dict.fromkeys("\n".join(texts).lower().split()):
        out.update(dict.fromkeys(content_words(token)))
    return list(out)


class WordVectors:
    """Unit vectors of single words, shared by every owner of a process (a word's vector depends on
    the word alone); at most ``limit`` are kept, the least recently used dropped first.

    A word the process has not seen is looked up with ``read`` (the deployment's stored words, see
    :mod:`cluster.memory.word_store`) before it is embedded; what is embedded goes to ``save``.
    """

    def __init__(self, embed: Embed, limit: int = 50_000, save: Save | None = None) -> None:
        self._embed = embed
        self._limit = limit
        self._save = save
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, words: Sequence[str], read: Read | None = None) -> dict[str, np.ndarray]:
        """Each word's vector: kept, else read, else embedded (the words missing both, in one call)."""
        with self._lock:
            known = {w: self._vectors[w] for w in words if w in self._vectors}
            for w in known:
                self._vectors.move_to_end(w)
        missing = [w for w in dict.fromkeys(words) if w not in known]
        fresh = read(missing) if missing and read is not None else {}
        missing = [w for w in missing if w not in fresh]
        if missing:
            made = np.asarray(self._embed(missing), dtype=np.float32)
            made /= np.maximum(np.linalg.norm(made, axis=1, keepdims=True), 1e-12)
            embedded = dict(zip(missing, made, strict=True))
            if self._save is not None:
                self._save(embedded)
            fresh.update(embedded)
        if fresh:
            with self._lock:
                self._vectors.update(fresh)
                while len(self._vectors) > self._limit:
                    self._vectors.popitem(last=False)
            known.update(fresh)
        return known


class TermSpace:
    """One owner's words and their unit vectors, as one matrix for a nearest-word search.

    Rows are appended into spare capacity (doubled when full), so growing by a write's few new words
    does not copy the matrix, and a search that read the row count before an append never sees it.
    """

    def __init__(self, dimension: int) -> None:
        self._terms: list[str] = []
        self._index: dict[str, int] = {}
        self._rows = np.zeros((64, dimension), dtype=np.float32)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __contains__(self, word: str) -> bool:
        return word in self._index

    def add(self, vectors: dict[str, np.ndarray]) -> None:
        """Append the words not yet here (adds are serialised by :class:`TermSpaces`; searches may run meanwhile)."""
        new = [w for w in vectors if w not in self._index]
        if not new:
            return
        need = self._count + len(new)
        rows = self._rows
        if need > len(rows):
            rows = np.zeros((max(need, 2 * len(rows)), rows.shape[1]), dtype=np.float32)
            rows[: self._count] = self._rows[: self._count]
        rows[self._count : need] = np.stack([vectors[word] for word in new])
        for i, word in enumerate(new, start=self._count):
            self._terms.append(word)
            self._index[word] = i
        self._rows = rows
        self._count = need

    def nearest(self, vector: np.ndarray, count: int) -> list[tuple[str, float]]:
        """The ``count`` words most similar to ``vector``, best first (ties by word)."""
        n, rows, terms = self._count, self._rows, self._terms
        if n == 0:
            return []
        sims = rows[:n] @ vector
        count = min(count, n)
        best = np.argpartition(-sims, count - 1)[:count]
        return sorted(((terms[i], float(sims[i])) for i in best), key=lambda t: (-t[1], t[0]))


def expand(
    query: str,
    space: TermSpace,
    vectors: WordVectors,
    *,
    per_word: int,
    min_similarity: float,
    names: Collection[str] = (),
    present: Callable[[list[str]], set[str]] | None = None,
    read: Read | None = None,
) -> tuple[tuple[str, float], ...]:
    """The owner's words that stand in for the query's content words, at most ``per_word`` each,
    with their similarity (a word near two query words keeps the higher).

    A neighbour counts when its cosine similarity reaches ``min_similarity``, it is not an inflection
    of the word (same first letters), not a query word and not a name: names (``names``, lower-case
    words of the entities the owner knows) are the entity stage's, and a name's nearest words are
    other names. ``present`` returns which of some words a stored memory still holds: a space keeps
    the words of forgotten memories, and the choice must be the one any process would make.
    ``read`` looks up stored word vectors (see :class:`WordVectors`).
    """
    words = [w for w in content_words(query) if w not in names]
    if not words or not len(space):
        return ()
    options: list[list[tuple[str, float]]] = []
    for word, vector in vectors.get(words, read).items():
        # Look well past ``per_word``: some neighbours are skipped here, some by ``present``.
        near = space.nearest(vector, per_word + 8)
        options.append(
            [
                (term, similarity)
                for term, similarity in near
                if similarity >= min_similarity
                and term[:SAME_STEM] != word[:SAME_STEM]
                and term not in names
                and term not in words
            ]
        )
    if present is not None:
        held = present(list(dict.fromkeys(t for terms in options for t, _ in terms)))
        options = [[(t, s) for t, s in terms if t in held] for terms in options]
    chosen: dict[str, float] = {}
    for terms in options:
        for term, similarity in terms[:per_word]:
            chosen[term] = max(similarity, chosen.get(term, similarity))
    return tuple(chosen.items())


class TermSpaces(PerOwner[TermSpace]):
    """Each owner's term space, kept in the process and grown from the memories written since.

    ``load(after_seq)`` returns the texts of the owner's memories newer than ``after_seq`` and the
    newest seq seen; it is skipped while the owner's generation is the one the space was last grown
    at. Words of forgotten memories stay (see ``present`` in :func:`expand`). At most ``owners``
    spaces and ``max_words`` words in all are kept, the least recently used owners dropped first.
    """

    def __init__(self, vectors: WordVectors, dimension: int, owners: int = 1_000, max_words: int = 100_000) -> None:
        # The bound is in words: a space costs ``4 * dimension`` bytes a word (~150 MB at 100k 384-d words).
        super().__init__(lambda: TermSpace(dimension), owners, size=len, max_size=max_words)
        self.vectors = vectors

    def space(
        self,
        owner: str,
        load: Callable[[int], tuple[Iterable[str], int]],
        generation: int | None = None,
        read: Read | None = None,
    ) -> TermSpace:
        def new_words(space: TermSpace, after: int) -> tuple[dict[str, np.ndarray], int]:
            texts, newest = load(after)
            fresh = [w for w in words_of(texts) if w not in space]
            return (self.vectors.get(fresh, read) if fresh else {}), newest

        return self.get(owner, new_words, TermSpace.add, generation)
