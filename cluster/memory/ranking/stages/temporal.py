"""Temporal stage: memories whose day, or a time expression in their text read against that day, falls
in an interval the query names get ``time_boost``; for a "when" question, memories that state a time
("yesterday", "last May") get ``when_boost``, and for a "how long" question those that state a length
of time ("for 3 years", "since I was 17"): that is where the answer is written."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import date, timedelta
from functools import lru_cache

from cluster.memory.policy.ranking import RankingPolicy
from cluster.memory.ranking.facts import CandidateFacts
from cluster.memory.ranking.plan import QueryPlan
from cluster.memory.ranking.stage import Board, Note, Stage
from cluster.memory.timeparse import Interval, TimeMention, find_duration, find_times


class Temporal(Stage):
    name = "time"

    @classmethod
    def needs_facts(cls, plan: QueryPlan, policy: RankingPolicy) -> bool:
        return bool(
            ((plan.intervals or plan.yearless) and policy.time_boost > 0)
            or ((plan.asks_when or plan.asks_duration) and policy.when_boost > 0)
        )

    @classmethod
    def read_ahead(cls, facts: Collection[CandidateFacts], plan: QueryPlan) -> None:
        """Parse the time expressions this stage will read of these candidates, now.

        The parse is cached per text and day; the query calls this for the lexical candidates while
        their dense twins are still being searched, so :meth:`score` later finds them parsed.
        """
        if _reads_times(plan):
            for fact in facts:
                _mentions(fact.text, fact.day)

    def score(self, board: Board) -> None:
        self.times: dict[int, str] = {}
        plan, scores, facts = board.plan, board.scores, board.facts
        if plan.yearless:
            plan = _in_candidate_years(plan, facts.values())
        if plan.relative and board.policy.time_slack > 0:
            plan = _widened(plan, board.policy.time_slack)
        if plan.intervals and plan.asks_when and not any(_time_match(facts[s], plan) for s in scores if s in facts):
            # A time no candidate falls in says nothing about them ("When did she go camping in June?"
            # asked years after the conversation reads as this June): what answers "when" still does.
            plan = plan.model_copy(update={"intervals": ()})
        if not (_reads_times(plan) or plan.asks_duration):
            return
        policy = board.policy
        factor = 1.0 + (policy.time_boost if plan.intervals else policy.when_boost)
        for seq in scores:
            fact = facts.get(seq)
            if fact is None:
                continue
            time = _time_match(fact, plan)
            if time is not None:
                self.times[seq] = time
                scores[seq] *= factor

    def explain(self, seq: int) -> Note:
        time = self.times.get(seq)
        return Note({"time": time}, time is not None)


def _reads_times(plan: QueryPlan) -> bool:
    """Does the temporal stage read the candidates' time expressions for this query?"""
    return bool(plan.intervals or plan.yearless) or plan.asks_when


def _in_candidate_years(plan: QueryPlan, facts: Iterable[CandidateFacts]) -> QueryPlan:
    """The plan with its yearless times read in every year from the one before the candidates'
    first day to that of their last (a memory may speak of last year's May)."""
    years = {fact.day.year for fact in facts}
    if not years:
        return plan.model_copy(update={"intervals": plan.intervals + plan.yearless, "yearless": ()})
    moved = []
    for interval in plan.yearless:
        for year in range(min(years) - 1, max(years) + 1):
            try:
                moved.append(Interval(start=interval.start.replace(year=year), end=interval.end.replace(year=year)))
            except ValueError:
                continue  # 29 February of a common year
    return plan.model_copy(update={"intervals": plan.intervals + tuple(moved), "yearless": ()})


def _widened(plan: QueryPlan, slack: float) -> QueryPlan:
    """The plan with its relative times widened by ``slack`` times their distance from the anchor
    (at least a day each way, never past the anchor): "10 days ago" is rarely exactly ten."""
    anchor = plan.anchor
    if anchor is None:
        return plan
    wide = []
    for interval in plan.intervals:
        if interval in plan.relative:
            pad = timedelta(days=max(1, round(slack * abs((anchor - interval.end).days))))
            end = max(interval.end, min(interval.end + pad, anchor))
            interval = Interval(start=interval.start - pad, end=end)
        wide.append(interval)
    return plan.model_copy(update={"intervals": tuple(wide), "relative": ()})


def _time_match(fact: CandidateFacts, plan: QueryPlan) -> str | None:
    """The phrase that puts the memory in the query's time, or the time it states (for "when"), or
    the length of time it states (for "how long")."""
    if plan.intervals:
        if any(Interval.day(fact.day).overlaps(i) for i in plan.intervals):
            return "memory date"
        mentions = _mentions(fact.text, fact.day)
        return next((m.phrase for m in mentions if any(m.interval.overlaps(i) for i in plan.intervals)), None)
    if plan.asks_when:
        mentions = _mentions(fact.text, fact.day)
        return mentions[0].phrase if mentions else None
    if plan.asks_duration:
        return find_duration(fact.text)
    return None


@lru_cache(maxsize=16_384)
def _mentions(text: str, day: date) -> list[TimeMention]:
    # The same memories come back query after query; their time expressions do not change.
    return find_times(text, day)
