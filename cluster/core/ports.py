"""Ports shared across concepts: contracts implemented by adapters such as ``cluster.embedding``.

Each docstring states what an implementation must guarantee. Tests run the real implementations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Embedder(Protocol):
    """Turns text into unit-length vectors.

    ``embed`` returns one vector per text, in order, each of ``dimension`` floats with L2 norm 1,
    so inner product equals cosine. Raises ``StoreUnavailable`` if the model cannot be loaded or
    the endpoint cannot be reached.
    """

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...
