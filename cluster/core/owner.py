"""The owner every stored row belongs to: one check for every service that takes one."""

from __future__ import annotations

from cluster.core.errors import InvalidInput

#: An owner is stored and filtered on in this many characters at most (SQL columns, Milvus filters).
MAX_OWNER_CHARS = 200


def check_owner(owner: object) -> str:
    """The owner, if it is one a store can hold and a filter can name; else ``InvalidInput``.

    The owner comes from the caller's credential, never from a tool argument, but a bad one must
    still never reach a store: it must be a non-empty string of at most :data:`MAX_OWNER_CHARS`
    characters without control characters (U+0000-U+001F, U+007F): Postgres text cannot hold NUL,
    and a Milvus filter cannot name a control character.
    """
    if (
        not isinstance(owner, str)
        or not owner
        or len(owner) > MAX_OWNER_CHARS
        or any(ord(c) < 32 or ord(c) == 127 for c in owner)
    ):
        raise InvalidInput(
            f"owner must be a non-empty string of at most {MAX_OWNER_CHARS} characters without control characters"
        )
    return owner
