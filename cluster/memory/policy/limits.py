"""How large a memory may be."""

from __future__ import annotations

import json

from pydantic import Field, JsonValue

from cluster.core.errors import LimitExceeded
from cluster.core.types import Frozen


class MemoryLimits(Frozen):
    """How large a memory may be, in UTF-8 bytes (a JSON value or metadata counts as compact JSON).

    A memory is a fact, a preference or a piece of state that gets injected into a prompt, not a
    document store: 16 KiB is about 3,000 words, far beyond what the embedding model reads (256
    word pieces, about 1 KB of English) and small enough that a ``top_k`` of 50 answers at most
    about 1 MB. Unbounded values made a 3.9 MB write take 4-5 s and one ``top_k=100`` query answer
    98 MB. Metadata (source, tags, confidence) is smaller by nature; context (neighbouring turns,
    searched but never returned) may be as long as a value.
    """

    max_value_bytes: int = Field(default=16 * 1024, ge=64, le=16 * 1024 * 1024)
    max_metadata_bytes: int = Field(default=4 * 1024, ge=64, le=16 * 1024 * 1024)
    max_context_bytes: int = Field(default=16 * 1024, ge=64, le=16 * 1024 * 1024)

    def check(
        self,
        value: str | dict[str, JsonValue],
        metadata: dict[str, JsonValue] | None = None,
        context: str | None = None,
    ) -> None:
        """Raise ``LimitExceeded`` naming the first field over its limit."""
        _within("value", _size(value), self.max_value_bytes, "max_value_bytes")
        if metadata:
            _within("metadata", _size(metadata), self.max_metadata_bytes, "max_metadata_bytes")
        if context is not None:
            _within("context", _size(context), self.max_context_bytes, "max_context_bytes")


def _size(value: str | dict[str, JsonValue]) -> int:
    if isinstance(value, str):
        return len(value.encode())
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _within(name: str, size: int, limit: int, setting: str) -> None:
    if size > limit:
        raise LimitExceeded(
            f"memory {name} is {size} bytes; the limit is {limit} bytes (memory.{setting}, "
            f"HINDSIGHT_MEMORY__{setting.upper()})"
        )
