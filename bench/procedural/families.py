"""Every family the procedural benchmarks run: the demo's eleven hand-written ones
(:mod:`cluster.demo.envs`) and the generated ``gen-<seed>`` ones (:mod:`bench.procedural.generated`)."""

from __future__ import annotations

from bench.procedural.generated import family_seed, generated_episode
from cluster.demo.env_base import Episode
from cluster.demo.envs import FAMILIES
from cluster.demo.envs import make_episode as hand_written


def make_episode(family: str, seed: int, budget: int | None = None) -> Episode:
    """A fresh instance of ``family`` for ``seed``; ``gen-0042`` is the generated family of seed 42.

    Raises:
        KeyError: Unknown family.
    """
    if family in FAMILIES:
        return hand_written(family, seed, budget)
    return generated_episode(family, seed, budget)


def is_family(name: str) -> bool:
    """Whether :func:`make_episode` knows ``name``: a hand-written family or ``gen-<seed>``."""
    return name in FAMILIES or family_seed(name) is not None
