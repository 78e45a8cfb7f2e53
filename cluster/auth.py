"""Who is calling: bearer tokens map to owners; without tokens, one local owner (development mode).

The owner always comes from the credential, never from a tool argument, and every store call is
constrained by it.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

from cluster.core.errors import Unauthorized

logger = logging.getLogger(__name__)


class OwnerResolver:
    """Maps a request's ``Authorization: Bearer <token>`` header to an owner."""

    def __init__(self, tokens: dict[str, str], local_owner: str = "local") -> None:
        self._tokens = dict(tokens)
        self.local_owner = local_owner

    @property
    def development_mode(self) -> bool:
        return not self._tokens

    def owner_for_token(self, token: str | None) -> str:
        """The owner a token stands for.

        Raises:
            Unauthorized: tokens are configured and this one is missing or unknown.
        """
        if self.development_mode:
            return self.local_owner
        if not token:
            raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
        for known, owner in self._tokens.items():
            # Constant-time comparison: response timing must not reveal token prefixes.
            if hmac.compare_digest(known.encode(), token.encode()):
                return owner
        raise Unauthorized("unknown bearer token")

    def owner_for(self, request: Any) -> str:
        """The owner of an HTTP request (a Starlette request), or of a transport without one (stdio)."""
        if request is None:
            # stdio and in-process clients have no credential: they run as the configured local owner.
            return self.local_owner
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        return self.owner_for_token(token.strip() if scheme.lower() == "bearer" else None)
