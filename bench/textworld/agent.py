"""The hindsight agent for games whose calls act on one of many things: it asks per thing.

At a step, for each thing that some valid call acts on with a choice of calls (a held object
that can go in several places), the agent asks ``query_experience`` with that thing as the
snapshot's ``focus`` — the view the step is recorded in — and follows the first served
template whose call is one of the game's valid actions and did not already fail when followed
in this game (the same advice in the same situation would fail again). Where nothing applies
it explores as the no-memory agent does, leaving out the calls an applicable rule rules out
for the thing (the blanket's other places, while the one it goes in is closed or elsewhere).
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.textworld.game import GameEpisode, options_on
from cluster.demo.agents import Decision, HindsightPolicy
from cluster.demo.env_base import Call, Episode, StepResult, StepView
from cluster.demo.following import Served, advised_call, follow, usable
from cluster.demo.recording import ToolClient


class FocusedHindsightPolicy(HindsightPolicy):
    """:class:`HindsightPolicy`, asking once per thing acted on (see the module docstring)."""

    def __init__(self, *, top_k: int | None = None, min_confidence: float | None = None) -> None:
        super().__init__(top_k=top_k, min_confidence=min_confidence)
        self._failed: list[Call] = []

    async def begin(self, client: ToolClient, episode: Episode) -> None:
        await super().begin(client, episode)
        self._failed = []

    def observe(self, view: StepView, decision: Decision, result: StepResult) -> None:
        super().observe(view, decision, result)
        if decision.source == "template" and result.status != "success":
            self._failed.append(decision.call)

    async def choose(self, client: ToolClient, episode: Episode, view: StepView, tried: Sequence[Call]) -> Decision:
        if not isinstance(episode, GameEpisode) or not view.is_decision:
            return await super().choose(client, episode, view, tried)
        skipped: list[Call] = []
        for focus in options_on(view):
            narrowed = episode.focused(view, focus)
            served = await self.query(client, episode, narrowed)
            choice = follow(served, narrowed, episode.task_type, [*tried, *self._failed])
            if choice is not None and choice.call in narrowed.options:
                return Decision(call=choice.call, source="template", template_id=choice.template_id)
            skipped += self.aimed_elsewhere(served, narrowed, episode.task_type)
        # What templates avoid as a tool is not skipped: an avoided tool is often the one that,
        # aimed elsewhere, is right. Only the calls an aim rule rules out for this thing are.
        return Decision(call=self._explorer.pick(view, [*tried, *skipped]), source="explore")

    def aimed_elsewhere(self, served: Sequence[Served], view: StepView, task_type: str) -> list[Call]:
        """The calls on the view's thing that applicable aim rules rule out, while their own call cannot be made.

        An aim rule prefers a tool aimed one way and avoids it aimed elsewhere (``put`` the
        blanket in the drawers, not anywhere else). When the drawers are closed or in another
        room, its call is not a valid action yet; the other aims stay wrong meanwhile. A rule
        whose call already failed in this game says nothing (its aim was wrong here).
        """
        aims = [
            advised_call(s, view)
            for s in served
            if usable(s, view, task_type)
            and s.template.avoid is not None
            and s.template.avoid.tool == s.template.recommended.tool
        ]
        aims = [a for a in aims if a not in self._failed]
        tools = {a.action for a in aims}
        return [c for c in view.options if c.action in tools and c not in aims]
