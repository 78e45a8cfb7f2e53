"""Query expansion's rules, on a hand-made table of word vectors (the rules, not the model, are tested
here; tests/integration/memory/test_expansion.py runs them with the real embedder)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.memory.expansion import TermSpace, TermSpaces, WordVectors, content_words, expand, words_of

# Directions in a 4-d space: words about outdoor activities lie near "activities".
TABLE = {
    "activities": [1.0, 0.0, 0.0, 0.0],
    "camping": [0.9, 0.3, 0.0, 0.0],
    "hiking": [0.8, 0.4, 0.0, 0.0],
    "pottery": [0.7, 0.0, 0.5, 0.0],
    "activity": [0.99, 0.05, 0.0, 0.0],
    "melanie": [0.95, 0.0, 0.0, 0.1],
    "invoice": [0.0, 0.0, 0.0, 1.0],
}


class Table:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, words: list[str]) -> list[list[float]]:
        self.calls.append(list(words))
        return [TABLE.get(w, [0.0, 0.0, 1.0, 1.0]) for w in words]


def space_of(*words: str) -> tuple[TermSpace, WordVectors]:
    vectors = WordVectors(Table())
    space = TermSpace(4)
    space.add(vectors.get(list(words)))
    return space, vectors


def test_content_words_drop_stopwords_short_words_digits_and_possessives() -> None:
    assert content_words("What did Melanie's 2 kids do at the lake in May? Lake!") == ["melanie", "kids", "lake"]


def words(query: str, space: TermSpace, vectors: WordVectors, **rules: Any) -> tuple[str, ...]:
    return tuple(w for w, _ in expand(query, space, vectors, **rules))


def test_a_query_word_is_replaced_by_the_owners_nearest_words() -> None:
    space, vectors = space_of("camping", "hiking", "pottery", "invoice")
    found = expand("What activities?", space, vectors, per_word=2, min_similarity=0.5)
    assert [w for w, _ in found] == ["camping", "hiking"]  # pottery is third, the invoice far away
    assert found[0][1] > found[1][1] > 0.5  # each with its cosine similarity, best first
    assert words("What activities?", space, vectors, per_word=5, min_similarity=0.5) == ("camping", "hiking", "pottery")
    assert words("What activities?", space, vectors, per_word=5, min_similarity=0.95) == ()


def test_inflections_names_and_query_words_are_not_expansions() -> None:
    space, vectors = space_of("activity", "melanie", "camping")
    # "activity" is an inflection (the stemmer has it); "melanie" is a name (the entity stage's).
    assert words("activities", space, vectors, per_word=3, min_similarity=0.5, names={"melanie"}) == ("camping",)
    # A name in the query is not expanded either.
    assert words("Melanie", space, vectors, per_word=3, min_similarity=0.5, names={"melanie"}) == ()
    # A word the query already has is not added again (camping's own neighbour, "activity", is).
    assert words("activities camping", space, vectors, per_word=3, min_similarity=0.5, names={"melanie"}) == (
        "activity",
    )


def test_a_space_grows_without_losing_rows_and_keeps_order_by_similarity() -> None:
    space = TermSpace(2)
    rng = np.random.default_rng(7)
    made = {f"w{i:03d}": v / np.linalg.norm(v) for i, v in enumerate(rng.normal(size=(300, 2)).astype(np.float32))}
    for start in range(0, 300, 7):  # small appends past the first capacity, as writes come
        space.add(dict(list(made.items())[start : start + 7]))
    space.add(made)  # adding again changes nothing
    assert len(space) == 300
    target = np.asarray([1.0, 0.0], dtype=np.float32)
    expected = sorted(made, key=lambda w: (-float(made[w] @ target), w))[:5]
    assert [w for w, _ in space.nearest(target, 5)] == expected


def test_word_vectors_embed_each_word_once_and_spaces_grow_from_new_rows_only() -> None:
    table = Table()
    spaces = TermSpaces(WordVectors(table), 4)
    loads: list[int] = []
    rows = {1: "We went camping", 2: "Pottery class today", 3: "Hiking and camping"}

    def load(after: int) -> tuple[list[str], int]:
        loads.append(after)
        newer = [seq for seq in rows if seq > after]
        return [rows[s] for s in newer], max(newer, default=after)

    first = spaces.space("owner", load, generation=1)
    assert sorted(first.nearest(np.asarray(TABLE["activities"], dtype=np.float32), 10))[0][0] == "camping"
    assert spaces.space("owner", load, generation=1) is first
    assert loads == [0]
    rows[4] = "Camping again, then pottery"
    spaces.space("owner", load, generation=2)
    assert loads == [0, 3]
    embedded = [w for call in table.calls for w in call]
    assert len(embedded) == len(set(embedded))  # "camping" and "pottery" were not embedded again


def test_spaces_are_bounded_by_their_words_in_all() -> None:
    spaces = TermSpaces(WordVectors(Table()), 4, max_words=3)
    loads: list[tuple[str, int]] = []

    def texts(owner: str, text: str) -> Any:
        def load(after: int) -> tuple[list[str], int]:
            loads.append((owner, after))
            return ([text] if after < 1 else []), 1

        return load

    spaces.space("a", texts("a", "camping hiking"), generation=1)
    spaces.space("b", texts("b", "pottery invoice"), generation=1)  # 4 words in all: "a" goes
    assert len(spaces.space("b", texts("b", "pottery invoice"), generation=1)) == 2
    assert loads == [("a", 0), ("b", 0)]
    spaces.space("a", texts("a", "camping hiking"), generation=1)  # read again from the start
    assert loads[-1] == ("a", 0)
    # One owner alone above the bound is kept: it is the one in use.
    big = spaces.space("c", texts("c", "camping hiking pottery invoice"), generation=1)
    assert len(big) == 4
    assert spaces.space("c", texts("c", "x"), generation=1) is big


def test_stored_words_are_read_before_any_is_embedded_and_only_embedded_ones_are_saved() -> None:
    table = Table()
    saved: list[dict[str, np.ndarray]] = []
    vectors = WordVectors(table, save=saved.append)
    stored = {"camping": np.asarray(TABLE["camping"], dtype=np.float32)}
    reads: list[list[str]] = []

    def read(words: list[str]) -> dict[str, np.ndarray]:
        reads.append(words)
        return {w: stored[w] for w in words if w in stored}

    got = vectors.get(["camping", "hiking"], read)
    assert reads == [["camping", "hiking"]]
    assert table.calls == [["hiking"]]  # the stored word is not embedded
    assert [sorted(s) for s in saved] == [["hiking"]]  # nor saved again
    assert np.allclose(got["camping"], TABLE["camping"])
    assert np.isclose(np.linalg.norm(got["hiking"]), 1.0)
    # Both are kept in the process now: nothing is read or embedded again.
    vectors.get(["hiking", "camping"], read)
    assert len(reads) == 1
    assert len(table.calls) == 1


def test_words_longer_than_a_stored_word_are_no_words() -> None:
    assert content_words("a " + "x" * 65 + " lake " + "y" * 64) == ["lake", "y" * 64]


TEXTS = st.lists(st.text(alphabet=st.sampled_from(list("abcdeS's’ \n\t-,.é1")), max_size=30), max_size=6)


@given(texts=TEXTS)
@settings(max_examples=400, deadline=None)
def test_words_of_many_texts_are_the_content_words_of_them_joined(texts: list[str]) -> None:
    assert words_of(texts) == content_words("\n".join(texts))
