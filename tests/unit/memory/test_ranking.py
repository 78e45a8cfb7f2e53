"""The ranking stages: fusion of the searches' rankings, then entity, temporal and session evidence, and
what each reports of a memory."""

from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.memory.entities import Vocabulary
from cluster.memory.expansion import content_words
from cluster.memory.policy import RankingPolicy
from cluster.memory.ranking import (
    CandidateFacts,
    Candidates,
    QueryPlan,
    Ranking,
    facts_of,
    needs_facts,
    plan_query,
    rank,
)
from cluster.memory.ranking.registry import STAGES
from cluster.memory.ranking.stage import Board, Note, Source, Stage
from cluster.memory.ranking.stages.fusion import fuse
from cluster.memory.timeparse import Interval

DAY = date(2023, 5, 9)
FUSION_ONLY = RankingPolicy(
    entity_boost=0, time_boost=0, when_boost=0, session_weight=0, role_boost=0, recency_boost=0, coverage_decay=1
)


def only(**stage: float) -> RankingPolicy:
    return FUSION_ONLY.model_copy(update=stage)


def fact(seq: int, *, speaker: str = "Gina", text: str = "", day: date = DAY, session: str = "1") -> CandidateFacts:
    return CandidateFacts(seq=seq, entities=frozenset({speaker}), text=text, day=day, session=session)


def ranking(
    dense: Sequence[int],
    lexical: Sequence[int],
    facts: Mapping[int, CandidateFacts],
    plan: QueryPlan,
    policy: RankingPolicy,
    limit: int | None = None,
) -> Ranking:
    """The ranking of candidates the dense and lexical searches found in this order."""
    found = {"dense": dict.fromkeys(dense, 0.5), "lexical": dict.fromkeys(lexical, 2.0)}
    return rank(Candidates(found=found, facts=facts, plan=plan), policy, limit)


def order(
    dense: Sequence[int],
    lexical: Sequence[int],
    facts: Mapping[int, CandidateFacts],
    plan: QueryPlan,
    policy: RankingPolicy,
) -> list[int]:
    return [r.seq for r in ranking(dense, lexical, facts, plan, policy).top]


def test_plan_query_recognises_entities_times_and_when() -> None:
    plan = plan_query("When did Gina go to Paris in May 2023?", Vocabulary(["Gina", "Jon"]), DAY)
    assert plan.entities == ("Gina",)
    assert plan.intervals == (Interval(start=date(2023, 5, 1), end=date(2023, 5, 31)),)
    assert plan.asks_when
    assert not plan_query("What did Jon paint?", Vocabulary(["Gina"]), DAY).asks_when


def test_a_query_reads_its_relative_times_against_the_one_day_it_names() -> None:
    vocabulary = Vocabulary(["Maria"])
    puppy = plan_query("What puppy did Maria get two days before August 11, 2023?", vocabulary, DAY)
    assert puppy.intervals == (Interval.day(date(2023, 8, 9)), Interval.day(date(2023, 8, 11)))
    sunday = plan_query("What did Maria see the Sunday before October 25, 2022?", vocabulary, DAY)
    assert sunday.intervals[0] == Interval.day(date(2022, 10, 23))
    # Without one named day, relative times are read against today.
    assert plan_query("What did Maria do last week?", vocabulary, DAY).intervals == (
        Interval(start=date(2023, 5, 1), end=date(2023, 5, 7)),
    )


def test_fusion_alone_orders_by_reciprocal_rank() -> None:
    fused = ranking([1, 2], [2, 3], {}, QueryPlan(), FUSION_ONLY)
    assert [r.seq for r in fused.top] == [2, 3, 1]
    assert [fused.explain(seq)["stages"] for seq in (2, 3, 1)] == [("dense", "lexical"), ("lexical",), ("dense",)]
    why = fused.explain(3)
    assert (why["dense_similarity"], why["dense_rank"], why["lexical_score"], why["lexical_rank"]) == (
        None,
        None,
        2.0,
        2,
    )
    assert why["fused"] == fused.top[1].score


def test_the_entity_stage_lifts_the_named_persons_memories() -> None:
    facts = {1: fact(1, speaker="Jon"), 2: fact(2, speaker="Gina")}
    plan = QueryPlan(entities=("Gina",))
    assert order([1, 2], [1, 2], facts, plan, FUSION_ONLY) == [1, 2]
    ranked = ranking([1, 2], [1, 2], facts, plan, only(entity_boost=1.0))
    assert [r.seq for r in ranked.top] == [2, 1]
    assert ranked.explain(2)["entities"] == ("Gina",)
    assert ranked.explain(2)["stages"] == ("dense", "lexical", "entity")
    assert ranked.explain(1)["stages"] == ("dense", "lexical")


def test_the_temporal_stage_reads_a_memorys_relative_time_against_its_own_day() -> None:
    facts = {
        1: fact(1, text="I painted a lake", day=date(2023, 6, 20)),
        # Said on 2 June: "last week" is the week of 22 May, inside the asked month.
        2: fact(2, text="I painted a sunset last week", day=date(2023, 6, 2)),
    }
    plan = QueryPlan(intervals=(Interval(start=date(2023, 5, 1), end=date(2023, 5, 31)),))
    ranked = ranking([1, 2], [1, 2], facts, plan, only(time_boost=1.0))
    assert [r.seq for r in ranked.top] == [2, 1]
    assert ranked.explain(2)["time"] == "last week"
    assert "time" in ranked.explain(2)["stages"]


def test_a_when_question_prefers_memories_that_state_a_time() -> None:
    facts = {1: fact(1, text="The support group was powerful"), 2: fact(2, text="I went to a support group yesterday")}
    ranked = ranking([1, 2], [1, 2], facts, QueryPlan(asks_when=True), only(when_boost=1.0))
    assert [r.seq for r in ranked.top] == [2, 1]
    assert ranked.explain(2)["time"] == "yesterday"


def test_a_when_question_whose_time_no_candidate_falls_in_still_prefers_memories_that_state_a_time() -> None:
    facts = {
        1: fact(1, text="We love camping with the kids", day=date(2023, 7, 1)),
        2: fact(2, text="We went camping two weekends ago", day=date(2023, 7, 1)),
    }
    june = Interval(start=date(2026, 6, 1), end=date(2026, 6, 30))  # "in June", asked in 2026
    ranked = ranking([1, 2], [1, 2], facts, QueryPlan(intervals=(june,), asks_when=True), only(when_boost=1.0))
    assert [r.seq for r in ranked.top] == [2, 1]
    assert ranked.explain(2)["time"] == "two weekends ago"
    # When a candidate does fall in the asked time, that is what counts.
    in_june = {**facts, 3: fact(3, text="Camping!", day=date(2026, 6, 5))}
    plan = QueryPlan(intervals=(june,), asks_when=True)
    ranked = ranking([1, 2, 3], [1, 2, 3], in_june, plan, only(time_boost=1.0, when_boost=1.0))
    assert (ranked.top[0].seq, ranked.explain(3)["time"]) == (3, "memory date")
    assert ranked.explain(ranked.top[1].seq)["time"] is None


def test_a_time_named_without_its_year_is_read_in_the_candidates_years() -> None:
    plan = plan_query("Which outdoor spot did Joanna visit in May?", Vocabulary(["Joanna"]), DAY)
    assert plan.intervals == ()
    assert plan.yearless == (Interval(start=date(2023, 5, 1), end=date(2023, 5, 31)),)
    assert plan_query("What did Joanna do last May?", Vocabulary([]), DAY).yearless == ()
    facts = {
        1: fact(1, text="We hiked to a lake", day=date(2021, 8, 2)),
        2: fact(2, text="I took this photo at Whispering Falls", day=date(2021, 5, 20)),
    }
    ranked = ranking([1, 2], [1, 2], facts, plan, only(time_boost=1.0))
    assert [(r.seq, ranked.explain(r.seq)["time"]) for r in ranked.top] == [(2, "memory date"), (1, None)]


def test_a_how_long_question_prefers_memories_that_state_a_length_of_time() -> None:
    plan = plan_query("How long has Nate had his turtles?", Vocabulary(["Nate"]), DAY)
    assert plan.asks_duration
    assert not plan.asks_when
    assert not plan_query("How long ago did Nate get turtles?", Vocabulary([]), DAY).asks_duration
    facts = {
        1: fact(1, text="Turtles bring me joy and peace", speaker="Nate"),
        2: fact(2, text="I've had them for 3 years now!", speaker="Nate"),
        3: fact(3, text="Since I was 17 or so I have painted", speaker="Nate"),
    }
    ranked = ranking([1, 2, 3], [1, 2, 3], facts, plan, only(when_boost=1.0))
    assert [r.seq for r in ranked.top] == [2, 3, 1]
    assert [ranked.explain(r.seq)["time"] for r in ranked.top] == ["3 years", "Since I was", None]
    assert "time" in ranked.explain(2)["stages"]


def test_session_evidence_lifts_a_memory_whose_session_holds_other_good_candidates() -> None:
    facts = {1: fact(1, session="a"), 2: fact(2, session="b"), 3: fact(3, session="b"), 4: fact(4, session="b")}
    plan = QueryPlan()
    # Without session evidence 1 ranks first on both lists.
    assert order([1, 2, 3, 4], [1, 3, 2, 4], facts, plan, FUSION_ONLY)[0] == 1
    ranked = ranking([1, 2, 3, 4], [1, 3, 2, 4], facts, plan, only(session_weight=2.0))
    best = ranked.top[0].seq
    assert best != 1
    assert ranked.explain(best)["session_bonus"] > 0
    assert "session" in ranked.explain(best)["stages"]


def test_memories_without_a_session_support_each_other_by_their_day() -> None:
    may_9 = CandidateFacts(seq=1, day=DAY)
    facts = {1: may_9, 2: CandidateFacts(seq=2, day=DAY), 3: CandidateFacts(seq=3, day=date(2023, 5, 10))}
    assert may_9.group == "2023-05-09"
    ranked = ranking([1, 2, 3], [], facts, QueryPlan(), only(session_weight=1.0, session_top=2))
    why = {seq: ranked.explain(seq) for seq in (1, 2, 3)}
    fused = {seq: why[seq]["fused"] for seq in why}
    # 1 and 2 share their day: each gains the mean of the day's two fused scores; 3 its own score.
    day_support = (fused[1] + fused[2]) / 2
    assert why[1]["session_bonus"] == why[2]["session_bonus"] == day_support
    assert why[3]["session_bonus"] == fused[3] / 2
    assert next(r.score for r in ranked.top if r.seq == 1) == fused[1] + day_support


def test_the_latest_of_memories_about_the_same_thing_ranks_first_and_the_earlier_stay() -> None:
    # A fact that changed: the January memory matches the words better, the June one is in effect.
    facts = {
        1: fact(1, text="My car is a Honda Civic", day=date(2023, 1, 10), session="jan"),
        2: fact(2, text="My car is a Tesla now", day=date(2023, 6, 1), session="jun"),
        3: fact(3, text="The weather was nice", day=date(2023, 3, 1), session="mar"),
    }
    assert order([1, 2, 3], [1, 2, 3], facts, QueryPlan(), FUSION_ONLY) == [1, 2, 3]
    ranked = ranking([1, 2, 3], [1, 2, 3], facts, QueryPlan(), only(recency_boost=0.5))
    seqs = [r.seq for r in ranked.top]
    assert seqs[0] == 2
    assert 1 in seqs
    assert "recency" in ranked.explain(2)["stages"]
    assert "recency" not in ranked.explain(1)["stages"]  # the earliest day gains nothing
    # All on one day: nothing is later than anything else.
    same_day = {seq: fact(seq) for seq in (1, 2, 3)}
    assert order([1, 2, 3], [1, 2, 3], same_day, QueryPlan(), only(recency_boost=0.5)) == [1, 2, 3]


def test_a_question_about_the_askers_own_life_ranks_their_turns_above_the_assistants() -> None:
    vocabulary = Vocabulary(["user", "assistant"])
    mine = plan_query("What size is my new TV?", vocabulary, DAY)
    said = plan_query("Can you remind me of the deli you recommended near the Vatican?", vocabulary, DAY)
    assert (mine.asks_of, said.asks_of) == ("person", "assistant")
    assert plan_query("What did Gina paint?", Vocabulary(["Gina"]), DAY).asks_of is None
    # The assistant's long answer about TVs matches better by words than the user's short turn.
    facts = {1: fact(1, speaker="assistant"), 2: fact(2, speaker="user"), 3: fact(3, speaker="Gina")}
    assert order([1, 2, 3], [1, 2, 3], facts, mine, FUSION_ONLY) == [1, 2, 3]
    assert order([1, 2, 3], [1, 2, 3], facts, mine, only(role_boost=0.5)) == [2, 1, 3]
    assert order([1, 2, 3], [2, 1, 3], facts, said, only(role_boost=0.5))[0] == 1
    # Between two named people there is no chat role: nothing moves.
    named = {seq: fact(seq, speaker=name) for seq, name in ((1, "Jon"), (2, "Gina"), (3, "Gina"))}
    assert order([1, 2, 3], [1, 2, 3], named, mine, only(role_boost=0.5)) == [1, 2, 3]


def test_a_relative_time_in_the_query_is_read_loosely_an_absolute_one_exactly() -> None:
    asked = date(2023, 5, 28)
    plan = plan_query("What did I buy 10 days ago, in May 2023?", Vocabulary(), asked)
    assert plan.relative == (Interval.day(date(2023, 5, 18)),)  # "May 2023" is not relative
    facts = {1: fact(1, day=date(2023, 5, 16)), 2: fact(2, day=date(2023, 4, 28))}
    exact = ranking([2, 1], [2, 1], facts, plan.model_copy(update={"intervals": plan.relative}), only(time_boost=1.0))
    assert [r.seq for r in exact.top] == [2, 1]  # 16 May is not the 18th
    loose = ranking(
        [2, 1],
        [2, 1],
        facts,
        plan.model_copy(update={"intervals": plan.relative}),
        only(time_boost=1.0, time_slack=0.25),
    )
    assert [r.seq for r in loose.top] == [1, 2]
    assert loose.explain(1)["time"] == "memory date"


def test_coverage_gives_the_next_places_to_other_sessions_before_more_of_one() -> None:
    # Four turns of session "a" lead both lists; "b" and "c" each hold one good turn.
    facts = {
        1: fact(1, session="a"),
        2: fact(2, session="a"),
        3: fact(3, session="a"),
        4: fact(4, session="a"),
        5: fact(5, session="b"),
        6: fact(6, session="c"),
    }
    found = [1, 2, 3, 4, 5, 6]
    assert order(found, found, facts, QueryPlan(), FUSION_ONLY)[:3] == [1, 2, 3]
    ranked = ranking(found, found, facts, QueryPlan(), only(coverage_decay=0.5), limit=3)
    assert [r.seq for r in ranked.top] == [1, 5, 6]
    # A mild decay keeps a session far ahead in front: its second turn still beats "c"'s first.
    mild = order(found, found, facts, QueryPlan(), only(coverage_decay=0.95))
    assert mild.index(2) < mild.index(6)
    # Without sessions, memories of one day count as one.
    undated = {seq: CandidateFacts(seq=seq, day=DAY if seq < 5 else date(2023, 5, 10)) for seq in found}
    assert order(found, found, undated, QueryPlan(), only(coverage_decay=0.5))[:2] == [1, 5]


def test_facts_come_from_metadata_before_the_stored_fields() -> None:
    written = datetime(2026, 1, 1, tzinfo=UTC)
    meta = {"speaker": "Gina", "session": 3, "session_date_time": "8 May, 2023"}
    facts = facts_of(1, "shop", meta, "Gina: hi", None, written)
    assert facts.entities == {"Gina", "shop"}
    assert facts.session == "3"
    assert facts.day == date(2023, 5, 8)
    assert facts_of(2, None, {}, "", "s-1", written).session == "s-1"
    assert facts_of(2, None, {}, "", None, written).day == date(2026, 1, 1)


def test_the_best_few_are_the_head_of_the_full_ranking() -> None:
    # Ties in score (same rank in both lists, same session) included: they are broken by seq.
    dense = [(7 * i) % 97 for i in range(60)]
    lexical = [(11 * i + 3) % 97 for i in range(60)]
    facts = {s: fact(s, session=str(s % 5), speaker="Gina" if s % 3 else "Jon") for s in set(dense) | set(lexical)}
    plan = QueryPlan(entities=("Jon",))
    full = ranking(dense, lexical, facts, plan, RankingPolicy()).top
    assert len(full) == len(set(dense) | set(lexical))
    for limit in (1, 5, 10, 200):
        assert ranking(dense, lexical, facts, plan, RankingPolicy(), limit).top == full[:limit]


WORDISH = st.text(alphabet=st.sampled_from(list("abcdoGS's’ -,.é1")), max_size=40)


EXPANDED = st.lists(st.sampled_from(["dog", "dogs", "abc", "sss", "god", "cod", "ooo", "éss"]), max_size=5)


@given(text=WORDISH, first=EXPANDED, then=EXPANDED)
@settings(max_examples=400, deadline=None)
def test_a_fact_holds_exactly_the_words_of_its_text(text: str, first: list[str], then: list[str]) -> None:
    # The substring check in front and the words kept after are shortcuts: the answer is the
    # text's content words, whatever was asked before.
    fact = CandidateFacts(seq=1, day=date(2024, 1, 1), text=text)
    for words in (first, then):
        assert fact.holds(words) == tuple(w for w in words if w in set(content_words(text)))


def test_holds_reads_possessives_and_case_as_words() -> None:
    fact = CandidateFacts(seq=1, day=date(2024, 1, 1), text="My Dog's bowl, and the puppies")
    assert fact.holds(["dog", "bowl", "puppy", "puppies", "owl"]) == ("dog", "bowl", "puppies")


def test_the_registry_runs_the_searches_then_fusion_then_the_stages_after_it() -> None:
    assert [stage.name for stage in STAGES] == [
        "dense",
        "lexical",
        "expansion",
        "fusion",
        "entity",
        "time",
        "session",
        "role",
        "recency",
        "coverage",
    ]


def test_fusion_sums_the_rankings_it_is_given_and_skips_those_without_weight() -> None:
    sources = {"first": Source([1, 2], 1.0), "second": Source([2, 3], 0.5), "off": Source([4], 0.0)}
    assert fuse(sources, 20.0) == {1: 1 / 21, 2: 1 / 22 + 0.5 / 21, 3: 0.5 / 22}


def test_the_facts_are_read_when_one_stage_needs_them() -> None:
    assert not needs_facts(QueryPlan(entities=("Gina",)), FUSION_ONLY)
    assert needs_facts(QueryPlan(entities=("Gina",)), only(entity_boost=0.5))
    assert not needs_facts(QueryPlan(), only(entity_boost=0.5))
    assert needs_facts(QueryPlan(), only(session_weight=0.5))


class Latest(Stage):
    """A stage as a new one is written: the candidates told on the latest day among them gain a fifth."""

    name = "latest"

    @classmethod
    def needs_facts(cls, plan: QueryPlan, policy: RankingPolicy) -> bool:
        return True

    def score(self, board: Board) -> None:
        days = {seq: fact.day for seq in board.scores if (fact := board.facts.get(seq)) is not None}
        latest = max(days.values(), default=None)
        self.raised = {seq for seq, day in days.items() if day == latest}
        for seq in self.raised:
            board.scores[seq] *= 1.2

    def explain(self, seq: int) -> Note:
        return Note({}, seq in self.raised)


def test_a_stage_added_to_the_list_scores_and_explains_itself() -> None:
    facts = {1: fact(1, day=date(2023, 5, 1)), 2: fact(2, day=date(2023, 5, 2))}
    found = {"dense": {1: 0.9, 2: 0.8}, "lexical": {1: 3.0, 2: 2.0}}
    candidates = Candidates(found=found, facts=facts, plan=QueryPlan())
    assert [r.seq for r in rank(candidates, FUSION_ONLY).top] == [1, 2]
    stages = (*STAGES, Latest)
    assert needs_facts(QueryPlan(), FUSION_ONLY, stages)
    ranked = rank(candidates, FUSION_ONLY, stages=stages)
    assert [r.seq for r in ranked.top] == [2, 1]
    assert ranked.explain(2)["stages"] == ("dense", "lexical", "latest")
    assert ranked.explain(1)["stages"] == ("dense", "lexical")
