"""Which raw turns become long-term memories: at once by rule, or later when later turns refer back."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import Field

from cluster.core.types import Frozen, Name, Text, as_utc
from cluster.memory.policy.lifetime import Ttl
from cluster.memory.policy.scope import MemoryScope
from cluster.memory.policy.words import terms


class LogStatus(StrEnum):
    """Where a logged turn stands: waiting for re-evaluation, promoted, or evaluated and kept as a raw turn."""

    PENDING = "pending"
    PROMOTED = "promoted"
    KEPT = "kept"


class PromotionReason(StrEnum):
    EXPLICIT = "explicit"
    STATE_CHANGE = "state_change"
    REFERENCED_LATER = "referenced_later"


EXPLICIT = re.compile(
    r"\b(remember|don'?t forget|do not forget|keep in mind|note that|from now on|always|never)\b|记住|别忘|以后都",
    re.IGNORECASE,
)
STATE_CHANGE = re.compile(
    r"\b(switched|changed|moved|migrated|updated|upgraded|submitted|completed|finished|cancell?ed|"
    r"deployed|configured|renamed|deleted|set to|is now|are now|no longer)\b|已提交|已修改|切到|改成|完成了",
    re.IGNORECASE,
)


def write_trigger(text: str) -> PromotionReason | None:
    """The immediate write rule for a raw turn: an explicit request wins over a state change."""
    if EXPLICIT.search(text):
        return PromotionReason.EXPLICIT
    if STATE_CHANGE.search(text):
        return PromotionReason.STATE_CHANGE
    return None


def spoken(speaker: str, text: str) -> str:
    """A logged turn as its memory holds it: who said it, then what was said.

    Questions about a conversation name its people ("What did Caroline read?"), and a turn's own
    words rarely do; an agent that logs both sides of a conversation also needs to read who said a
    promoted turn. So a promoted turn's value, and each neighbouring turn its context holds, is this.
    """
    return f"{speaker}: {text}"


class LoggedTurn(Frozen):
    """One raw interaction as the delayed re-evaluation sees it."""

    log_id: uuid.UUID
    session_id: Name
    speaker: Name
    text: Text
    at: datetime


class PromotionPolicy(Frozen):
    """When a raw turn "turned out to matter": later turns keep coming back to what it said.

    A later turn *references* an earlier one when they share at least ``min_shared_terms`` salient
    terms (non-stopword, at least ``min_term_length`` characters, or digits). A turn referenced by
    ``min_references`` later turns, at least one in another session or at least ``min_gap``
    later, is promoted.
    """

    min_shared_terms: int = Field(default=2, ge=1)
    min_term_length: int = Field(default=4, ge=1)
    min_references: int = Field(default=1, ge=1)
    min_gap: timedelta = Field(default=timedelta(hours=1))
    horizon: timedelta = Field(default=timedelta(days=90), description="Later turns beyond this do not count.")

    def salient(self, text: str) -> frozenset[str]:
        return frozenset(t for t in terms(text) if len(t) >= self.min_term_length or t.isdigit())


class Promotion(Frozen):
    """A rule's decision to turn a raw turn into a long-term memory, with the evidence."""

    log_id: uuid.UUID
    reason: PromotionReason
    referenced_by: tuple[uuid.UUID, ...] = ()
    shared_terms: tuple[str, ...] = ()


def find_promotions(turns: Sequence[LoggedTurn], policy: PromotionPolicy) -> list[Promotion]:
    """Promote the pending turns that later turns referred back to.

    ``turns`` holds one owner's log in time order (pending and already-handled turns alike, since a
    handled turn may still reference a pending one). Returns at most one promotion per turn.
    """
    ordered = sorted(turns, key=lambda t: (as_utc(t.at), str(t.log_id)))
    salient = [policy.salient(t.text) for t in ordered]
    out: list[Promotion] = []
    for i, turn in enumerate(ordered):
        if not salient[i]:
            continue
        refs: list[uuid.UUID] = []
        shared: set[str] = set()
        far = False
        for j in range(i + 1, len(ordered)):
            later = ordered[j]
            gap = as_utc(later.at) - as_utc(turn.at)
            if gap > policy.horizon:
                break
            common = salient[i] & salient[j]
            if len(common) >= policy.min_shared_terms:
                refs.append(later.log_id)
                shared |= common
                far = far or later.session_id != turn.session_id or gap >= policy.min_gap
        if len(refs) >= policy.min_references and far:
            out.append(
                Promotion(
                    log_id=turn.log_id,
                    reason=PromotionReason.REFERENCED_LATER,
                    referenced_by=tuple(refs),
                    shared_terms=tuple(sorted(shared)),
                )
            )
    return out


def promotion_target(reason: PromotionReason, session_id: str) -> tuple[MemoryScope, Ttl]:
    """Where a promoted turn goes: explicit requests and hindsight finds are long-term user facts;
    a state change is the session's current state and lives as long as the session."""
    if reason is PromotionReason.STATE_CHANGE:
        return MemoryScope.session(session_id), Ttl.session()
    return MemoryScope.user(), Ttl.permanent()


_TURN_IDS = uuid.UUID("5d0f3c4e-8a57-4c55-9a51-6f1c2b7e9d10")


def turn_log_id(owner: str, session_id: str, speaker: str, text: str, at: datetime | None) -> uuid.UUID:
    """A logged turn's id, derived from what the turn is: sending the same turn again (a retry)
    names the same log entry instead of logging it twice. Without ``at`` the same words from the
    same speaker in the same session are the same turn."""
    moment = as_utc(at).isoformat() if at is not None else ""
    return uuid.uuid5(_TURN_IDS, json.dumps([owner, session_id, speaker, text, moment], ensure_ascii=False))
