"""Errors the core raises. Adapters (MCP tools, HTTP, CLI) map them to their transport."""


class HindsightError(Exception):
    """Root of every error hindsight raises on purpose."""


class InvalidInput(HindsightError, ValueError):
    """The caller sent something malformed: a field is missing, of the wrong type or out of range."""


class NotFound(HindsightError, LookupError):
    """The named object does not exist for this owner."""


class Conflict(HindsightError):
    """The write contradicts what is already stored (same id, different payload)."""


class LimitExceeded(HindsightError):
    """A configured limit (nodes per trajectory, context size, ...) would be exceeded."""


class TrajectoryClosed(Conflict):
    """The trajectory was finalized; it accepts no new nodes."""


class Unauthorized(HindsightError):
    """The caller's credential is missing or unknown."""


class StoreUnavailable(HindsightError):
    """A backing store (SQL, Milvus, embedding model) cannot be reached or loaded."""


class LeaseLost(Conflict):
    """A worker's claim on queued work lapsed and another worker took it over; its result is dropped."""
