"""Entities a query names are recognised from the owner's own vocabulary."""

from cluster.memory.entities import (
    Vocabulary,
    VocabularyCache,
    embedded_text,
    entity_values,
    mentions,
    speaker_of,
    without_names,
)


def test_names_are_found_in_any_case_and_with_possessives() -> None:
    vocabulary = Vocabulary(["Caroline", "Melanie", "New York"])
    assert vocabulary.named_in("What did caroline's friend give her?") == ("Caroline",)
    assert vocabulary.named_in("When did Melanie move to new york?") == ("Melanie", "New York")


def test_a_shortened_name_names_the_one_entity_it_starts() -> None:
    vocabulary = Vocabulary(["Caroline", "Melanie"])
    assert vocabulary.named_in("What did Mel paint?") == ("Melanie",)
    # Lower case or too short: an ordinary word, not a name.
    assert vocabulary.named_in("what did mel paint?") == ()
    assert vocabulary.named_in("What did Me paint?") == ()


def test_an_ambiguous_short_form_names_nobody() -> None:
    vocabulary = Vocabulary(["Jonathan", "Jones"])
    assert vocabulary.named_in("What did Jon say?") == ()


def test_unknown_people_are_not_entities() -> None:
    assert Vocabulary(["Caroline"]).named_in("What did Gina say to Jon?") == ()


def test_names_made_of_stopwords_are_ignored() -> None:
    vocabulary = Vocabulary(["me", "The", "Gina"])
    assert len(vocabulary) == 1
    assert vocabulary.named_in("Tell me the news") == ()


def test_entity_values_come_from_the_entity_field_and_entity_like_metadata() -> None:
    values = entity_values("project-x", {"speaker": "Gina", "people": ["Jon", 3], "session": 2, "note": "Paris"})
    assert values == {"project-x", "Gina", "Jon"}


def test_mentions_and_without_names() -> None:
    assert mentions("Caroline: I went to New York", "new york")
    assert not mentions("I went to York", "New York")
    assert without_names("What did Mel and Caroline's dog do?", ["Melanie", "Caroline"]) == "What did and dog do"


def test_the_cache_grows_a_vocabulary_from_the_newest_memories_only() -> None:
    cache = VocabularyCache(owners=1)
    asked: list[int] = []

    def load(after: int) -> tuple[set[str], int]:
        asked.append(after)
        return ({"Gina"}, 7) if after == 0 else ({"Jon"}, 9)

    assert "Gina" in cache.vocabulary("a", load)
    vocabulary = cache.vocabulary("a", load)
    assert "Gina" in vocabulary
    assert "Jon" in vocabulary
    assert asked == [0, 7]
    cache.vocabulary("b", lambda after: (set(), 0))  # evicts "a": at most one owner kept
    cache.vocabulary("a", load)
    assert asked == [0, 7, 0]


def test_a_vocabulary_is_not_read_again_while_the_owners_generation_stands() -> None:
    cache = VocabularyCache()
    asked: list[int] = []

    def load(after: int) -> tuple[set[str], int]:
        asked.append(after)
        return ({"Gina"}, 3) if after == 0 else ({"Jon"}, 5)

    assert "Gina" in cache.vocabulary("a", load, generation=4)
    cache.vocabulary("a", load, generation=4)  # nothing written since: no read
    assert asked == [0]
    assert "Jon" in cache.vocabulary("a", load, generation=5)  # a write bumped it: read what is new
    cache.vocabulary("a", load)  # no generation known: always read
    assert asked == [0, 3, 5]


def test_an_entity_key_is_read_in_any_style() -> None:
    styled = {"Speaker": "Gina", "authorName": "Jon", "place names": ["Paris"], "speakers": "No", "location_id": "L9"}
    assert entity_values(None, styled) == {"Gina", "Jon", "Paris"}
    assert entity_values(None, {"senderName": "Ada", "sent_by": "Bo"}) == {"Ada"}


def test_the_speaker_is_read_from_a_speaker_before_an_author_in_any_style() -> None:
    assert speaker_of({"authorName": "Jon", "Speaker": " Gina "}) == "Gina"
    assert speaker_of({"author": "Jon", "person": "Gina"}) == "Jon"
    assert speaker_of({"Sender": "Ada", "person": "Gina"}) == "Ada"
    # A list, a blank, an over-long value or a person the memory is about names no speaker.
    assert speaker_of({"speaker": ["Gina"], "author": "  ", "person": "Jon"}) is None
    assert speaker_of({"speaker": "x" * 61}) is None
    assert speaker_of({}) is None


def test_a_memory_is_embedded_as_said_by_the_speaker_only_its_metadata_names() -> None:
    assert embedded_text("I went to a support group", {"speaker": "Caroline"}) == "Caroline: I went to a support group"
    # A text that already names its speaker, or a memory without one, is embedded as written.
    assert embedded_text("Caroline: I went", {"speaker": "Caroline"}) == "Caroline: I went"
    assert embedded_text("Thanks, caroline's idea", {"speaker": "Caroline"}) == "Thanks, caroline's idea"
    assert embedded_text("Thanks, Caroline!", {"speaker": "Melanie"}) == "Melanie: Thanks, Caroline!"
    assert embedded_text("prefers dark mode", {"source": "settings"}) == "prefers dark mode"
