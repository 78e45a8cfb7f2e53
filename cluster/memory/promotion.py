"""Raw turns and their promotion to long-term memory.

``observe`` logs a turn (cheap); a turn that asks to be remembered, or reports a state change, is
stored at once by rule (:func:`~cluster.memory.policy.promotion.write_trigger`). Every other turn
waits for ``reevaluate``, the delayed job that promotes the turns later turns referred back to
(:func:`~cluster.memory.policy.promotion.find_promotions`). A promoted turn is written as any memory
is (:class:`~cluster.memory.writes.Writes`), searched with the turns logged beside it.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError, OperationalError

from cluster.core.errors import Conflict, NotFound, StoreUnavailable
from cluster.core.owner import check_owner
from cluster.core.types import as_utc, utcnow
from cluster.memory.models import (
    MAX_SOURCE_IDS,
    MaintenanceReport,
    MemoryObserve,
    MemoryWrite,
    MemoryWriteResult,
    ObserveResult,
)
from cluster.memory.neighbours import joined
from cluster.memory.policy.lifetime import validity_for
from cluster.memory.policy.limits import MemoryLimits
from cluster.memory.policy.promotion import (
    EXPLICIT,
    LoggedTurn,
    LogStatus,
    PromotionPolicy,
    PromotionReason,
    find_promotions,
    promotion_target,
    spoken,
    turn_log_id,
    write_trigger,
)
from cluster.memory.policy.state_change import state_key
from cluster.memory.repository.log import LoggedRow, LoggedTurnRow, TurnLog, pending_owners
from cluster.memory.repository.versions import Versions
from cluster.memory.writes import Writes
from cluster.storage.db import Database

logger = logging.getLogger(__name__)


class Promotions:
    """The raw-log part of the memory service (see :class:`~cluster.memory.service.MemoryService`)."""

    def __init__(self, database: Database, writes: Writes, *, promotion: PromotionPolicy, limits: MemoryLimits) -> None:
        self.db = database
        self.writes = writes
        self.promotion = promotion
        self.limits = limits

    # --------------------------------------------------------------------------------- observe

    def observe(self, owner: str, request: MemoryObserve, *, now: datetime | None = None) -> ObserveResult:
        """Log a raw turn; store it at once if a rule says so.

        Retry-safe: a turn already logged (same session, speaker, text and ``at``) is not logged or
        stored again; the answer names what the first call stored (``repeated``).
        """
        check_owner(owner)
        session_id, turn = request.session_id, request.turn
        # A logged turn may become a memory value later: it must fit one.
        self.limits.check(spoken(turn.speaker, turn.text), turn.metadata)
        now = now or utcnow()
        log_id = turn_log_id(owner, session_id, turn.speaker, turn.text, turn.at)
        with self.db.read() as session:
            earlier = TurnLog(session, owner).get(log_id)
        if earlier is not None:
            return self._repeated(owner, earlier)
        log = LoggedTurnRow(
            log_id=log_id,
            session_id=session_id,
            speaker=turn.speaker,
            text=turn.text,
            at=as_utc(turn.at) if turn.at is not None else now,
            metadata=turn.metadata,
            status=LogStatus.PENDING,
        )
        try:
            return self._log(owner, log, now)
        except (IntegrityError, Conflict):
            # The same turn sent twice at once: the other call logged it first.
            with self.db.read() as session:
                earlier = TurnLog(session, owner).get(log_id)
            if earlier is None:
                raise
            return self._repeated(owner, earlier)

    def _log(self, owner: str, log: LoggedTurnRow, now: datetime) -> ObserveResult:
        reason = write_trigger(log.text)
        if reason is None:
            with self.db.transaction() as session:
                TurnLog(session, owner).add(log)
            return ObserveResult(log_id=log.log_id)
        request = _promoted_write(log, reason, ())
        self.writes.check(owner, request)
        with self.db.read() as session:
            request = _in_its_session(TurnLog(session, owner), request, log, None)
        prepared = self.writes.prepare([request], [validity_for(request.ttl, request.scope, now)])
        with self.db.transaction() as session:
            inserted = self.writes.insert(session, owner, prepared, now)
            stored = inserted.results[0]
            promoted = {"status": LogStatus.PROMOTED, "memory_id": stored.memory_id, "evaluated_at": now}
            TurnLog(session, owner).add(log.model_copy(update=promoted))
        self.writes.settle(owner, inserted.vectors)
        return ObserveResult(log_id=log.log_id, promoted=stored, reason=reason, key=request.key)

    def _repeated(self, owner: str, earlier: LoggedTurnRow) -> ObserveResult:
        """The answer to a turn logged before: what its first call stored, if that still exists."""
        if earlier.memory_id is None:
            return ObserveResult(log_id=earlier.log_id, repeated=True)
        try:
            with self.db.read() as session:
                record = Versions(session, owner, self.db.dialect).get(earlier.memory_id).record
        except NotFound:  # forgotten since
            return ObserveResult(log_id=earlier.log_id, repeated=True)
        # A version's metadata never changes (an update writes a new version), so the rule's name is there.
        return ObserveResult(
            log_id=earlier.log_id,
            promoted=MemoryWriteResult(memory_id=record.memory_id, version=record.version),
            reason=PromotionReason(str(record.metadata["promoted"])),
            key=record.key,
            repeated=True,
        )

    # ------------------------------------------------------------------------------ re-evaluation

    def reevaluate(self, owner: str | None = None, *, now: datetime | None = None) -> MaintenanceReport:
        """The delayed promotion job: promote logged turns that later turns referred back to.

        Runs off the agent's path (a scheduler or the CLI calls it); ``observe`` never waits for it.
        A turn stays pending until promoted or until its horizon has passed without references.
        """
        now = now or utcnow()
        if owner is None:
            with self.db.read() as session:
                owners = pending_owners(session)
        else:
            owners = [check_owner(owner)]
        scanned = 0
        promoted: list[uuid.UUID] = []
        failed: list[str] = []
        for who in owners:
            # Rules read free text: an owner whose turns break one must not stop the others' promotion.
            try:
                pending, stored = self._reevaluate_owner(who, now)
            except (StoreUnavailable, OperationalError):
                raise  # a store (or the embedder) is down for every owner: nothing to isolate
            except Exception:
                logger.exception("re-evaluation of owner %r failed; its turns stay pending", who)
                failed.append(who)
                continue
            scanned += pending
            promoted.extend(stored)
        logger.info("re-evaluation scanned %s pending turns, promoted %s", scanned, len(promoted))
        return MaintenanceReport(
            scanned=scanned, changed=len(promoted), memory_ids=tuple(promoted), failed_owners=tuple(failed)
        )

    def _reevaluate_owner(self, who: str, now: datetime) -> tuple[int, list[uuid.UUID]]:
        """Promote one owner's pending turns; returns how many were pending and the memories stored."""
        requests: list[MemoryWrite] = []
        with self.db.read() as session:
            log = TurnLog(session, who)
            logged = log.since_pending()
            pending = {r.log_id: r for r in logged if r.status is LogStatus.PENDING}
            turns = [
                LoggedTurn(log_id=r.log_id, session_id=r.session_id, speaker=r.speaker, text=r.text, at=r.at)
                for r in logged
            ]
            decisions = [p for p in find_promotions(turns, self.promotion) if p.log_id in pending]
            # The promoted turns' neighbours from the same snapshot of the log.
            for decision in decisions:
                row = pending[decision.log_id]
                write = _promoted_write(row, decision.reason, decision.referenced_by)
                requests.append(_in_its_session(log, write, row, row.seq))
        prepared = self.writes.prepare(requests, [validity_for(r.ttl, r.scope, now) for r in requests])
        with self.db.transaction() as session:
            inserted = self.writes.insert(session, who, prepared, now)
            log = TurnLog(session, who)
            for decision, result in zip(decisions, inserted.results, strict=True):
                log.mark(decision.log_id, LogStatus.PROMOTED, now, result.memory_id)
            decided = {d.log_id for d in decisions}
            for log_id, row in pending.items():
                if log_id not in decided and now - row.at > self.promotion.horizon:
                    log.mark(log_id, LogStatus.KEPT, now, None)
        self.writes.settle(who, inserted.vectors)
        return len(pending), [r.memory_id for r in inserted.results]


def _promoted_write(
    log: LoggedTurnRow | LoggedRow, reason: PromotionReason, referenced_by: Sequence[uuid.UUID]
) -> MemoryWrite:
    """The memory a promoted turn becomes: who said it and what was said ("Caroline: I moved to
    Berlin"), keyed by what it changed when it is a state change (so the next change of the same
    thing supersedes it), else by the turn.

    Its provenance is the turn and the earliest of the later turns that referred to it: a turn
    a whole conversation keeps coming back to may have more references than a memory holds.
    """
    scope, ttl = promotion_target(reason, log.session_id)
    meta: dict[str, Any] = {
        **log.metadata,
        "speaker": log.speaker,
        "session_id": log.session_id,
        # The day the memory speaks of is the day it was said, not the day it was promoted
        # (a date the turn's own metadata holds still comes first: see ``memory_date``).
        "said_at": as_utc(log.at).isoformat(),
        "promoted": reason.value,
    }
    key = state_key(log.text, log.speaker) if reason is not PromotionReason.REFERENCED_LATER else None
    return MemoryWrite(
        key=key or turn_key(log.text, log.log_id),
        value=spoken(log.speaker, log.text),
        scope=scope,
        ttl=ttl,
        metadata=meta,
        source_ids=(str(log.log_id), *(str(r) for r in referenced_by[: MAX_SOURCE_IDS - 1])),
    )


_KEY_WORDS = 4
_KEY_CHARS = 32
_WEIGHTLESS = frozenset(
    "i me my we our you your he she it they them their the a an this that these those to of is are am be "
    "please and or so just also".split()
)


def turn_key(text: str, log_id: uuid.UUID) -> str:
    """A short key a person can read for a turn's memory: its first words of weight after what asked
    to remember it, and the start of its log id ("prefer_dark_mode-1a2b3c4d" for "Remember that I
    prefer dark mode"). Every query line shows the key, so it stays short; the id part keeps two
    turns that start alike from superseding each other.
    """
    trigger = EXPLICIT.search(text)
    rest = text[trigger.end() :] if trigger else text
    words = [w for w in re.findall(r"[^\W_]+", rest.lower()) if w not in _WEIGHTLESS][:_KEY_WORDS]
    slug = "_".join(words)[:_KEY_CHARS].rstrip("_") or "turn"
    return f"{slug}-{log_id.hex[:8]}"


def _in_its_session(
    log: TurnLog, request: MemoryWrite, turn: LoggedTurnRow | LoggedRow, seq: int | None
) -> MemoryWrite:
    """A promoted turn searched with the turns logged just before and after it in its session.

    A written memory of a conversation gets the memories told beside it as context; a promoted
    turn's memories are only the turns promoted too, while the log has every turn (the question it
    answers, the reply it got). It is the service's own context, as a derived one is, so the
    writer's context limit does not apply (each neighbour is cut to ``NEIGHBOUR_CHARS``).
    """
    before, after = (log.beside(turn.session_id, turn.at, seq, after=side) for side in (False, True))
    context = joined(before, after)
    return request if context is None else request.model_copy(update={"context": context})
