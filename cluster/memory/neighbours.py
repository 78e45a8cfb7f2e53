"""The memories told just before and after one in its conversation, searched as its context.

A turn of a conversation is often found through the turns beside it: the question it answers names
the topic its own words leave out ("What have you been reading lately?" / "Mostly Becky Chambers").
A writer may send such ``context`` itself; when it sends none and the memory belongs to a
conversation (:func:`cluster.memory.ranking.conversation_of`), the service keeps there the texts of
the current memories told just before and after it. The lexical stage searches context at a third of
a memory's own text's weight; no answer returns it.

It is kept in step as the conversation goes on: the memory told before a new one gains the new one
as its next neighbour, and when memories are deleted (forgotten, or purged once expired) the
neighbours that held their text are derived again from the memories now beside them. Neighbours are
the conversation's current, unarchived, unexpired memories, in the order they were written; only a
memory's first version takes part (a later one records a change, not the next thing said). A memory
that expires after a neighbour took its text stays in that context until the purge deletes it (it
is searched, never returned, meanwhile); one already expired is no new write's neighbour.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from cluster.memory.repository.versions import Neighbour, Versions

#: Each neighbour's text is cut here: enough for a turn, and a long neighbour must not swamp the memory.
NEIGHBOUR_CHARS = 1_000


def joined(before: str | None, after: str | None) -> str | None:
    """The derived context of a memory between these two texts (``None`` when it has neither)."""
    parts = [text[:NEIGHBOUR_CHARS] for text in (before, after) if text]
    return "\n".join(parts) or None


def next_in_thread(threads: Sequence[str | None], texts: Sequence[str]) -> list[str | None]:
    """Per write of a batch, the text of the batch's next write of the same conversation (if any)."""
    following: list[str | None] = [None] * len(threads)
    last: dict[str, int] = {}
    for i, thread in enumerate(threads):
        if thread is not None:
            if thread in last:
                following[last[thread]] = texts[i]
            last[thread] = i
    return following


class ThreadWrites:
    """The derived contexts of one batch of writes, in the order they are inserted.

    Built before the inserts, from each write's conversation (``None`` for one that joins none) and
    text: the memory after a new one is the batch's next write of its conversation; the memory
    before it is the previous one, or the conversation's last memory before the batch (read once per
    conversation). :meth:`link` then derives again, once the batch is inserted, the context of each
    such last memory whose context is derived.
    """

    def __init__(self, versions: Versions, now: datetime, threads: Sequence[str | None], texts: Sequence[str]) -> None:
        self.versions = versions
        self.now = now
        self.threads = threads
        self.texts = texts
        self._after = next_in_thread(threads, texts)
        self._last: dict[str, str] = {}
        self._before: dict[str, Neighbour | None] = {}

    def context(self, i: int) -> str | None:
        """Take write ``i`` into its conversation (every one, whatever context its writer sent) and
        return the context derived for it. Called for each write in order."""
        thread, text = self.threads[i], self.texts[i]
        if thread is None:
            return None
        if thread not in self._before:
            self._before[thread] = self.versions.neighbour(thread, None, self.now, after=False)
        before = self._last.get(thread)
        if before is None and (previous := self._before[thread]) is not None:
            before = previous.text
        self._last[thread] = text
        return joined(before, self._after[i])

    def link(self) -> None:
        """Give each conversation's memory before the batch its new next neighbour (the batch's first)."""
        for thread, previous in self._before.items():
            if previous is not None and previous.context_derived:
                rederive(self.versions, thread, previous.seq, self.now)


def rederive(versions: Versions, thread: str, seq: int, now: datetime) -> None:
    """Set a memory's derived context from the current memories now on each side of it."""
    before, after = (versions.neighbour(thread, seq, now, after=side) for side in (False, True))
    versions.set_context(seq, joined(before.text if before else None, after.text if after else None))


#: How far a deletion looks, on each side, for memories that may hold a copy of the deleted one's text.
_REACH = 64


def delete_versions(versions: Versions, seqs: Sequence[int], now: datetime) -> int:
    """Delete these versions; the memories that were beside them derive their context again, so
    that no copy of a deleted memory's text stays searchable. Returns how many rows went.

    A copy sits in the nearest current memory on each side, or in one between that has since been
    superseded, archived or expired (still searched with ``include_history``, or once restored), or
    beyond a memory that had expired when it was written: each side is read up to and including its
    nearest memory that is a neighbour at ``now``.
    """
    threads = versions.threads_of(seqs)
    removed = versions.delete_seqs(seqs)
    redo: dict[int, str] = {}
    for seq, thread in threads.items():
        for side in (False, True):
            for near in versions.thread_rows(thread, seq, now, after=side, limit=_REACH):
                if near.context_derived:
                    redo[near.seq] = thread
                if near.neighbour:
                    break
    for seq, thread in redo.items():
        rederive(versions, thread, seq, now)
    return removed
