"""Random task families for the procedural benchmark, drawn from a seeded grammar of rule shapes.

The hand-written families (:mod:`cluster.demo.envs`) are solved at the oracle's step count;
these are not written by anyone, so a learner's mistakes on shapes nobody thought of show up.
:func:`generate_family` draws a :class:`FamilySpec` from a seed and a :class:`GeneratorConfig`;
:func:`episode_class` makes the ``Episode`` subclass that plays it; ``gen-0042`` names the
default-config family of seed 42 wherever the harness takes a family name
(:func:`bench.procedural.families.make_episode`). Seeds 0-99 are for tuning, 100 and up for reporting.

Shapes (:data:`SHAPES`), drawn per family: a categorical feature of 2-8 values mapped onto 2-4
actions, a numeric threshold, 2-3 numeric bands, a boolean, a conjunction of two features; a
decision repeated 1-3 times per task; a rule reading the step before's answer; harmless
distractor features; always-failing decoy tools; a costlier tool that works everywhere; noisy
outcomes; tools answering at very different speeds (``uneven_latency``: every call reports
``latency_ms``, and a learner that reads cost may take a slow tool for a costlier alternative);
tools taking typed constants or varying values (dates in several formats, times, datetimes,
durations, versions, MIME types, paths, URLs, e-mails, ids, numbers, free text).
"""

from bench.procedural.generated.episode import (
    GeneratedEpisode,
    episode_class,
    family_seed,
    generated_class,
    generated_episode,
)
from bench.procedural.generated.grammar import DEFAULT_CONFIG, family_name, generate_family
from bench.procedural.generated.spec import SHAPES, FamilySpec, GeneratorConfig, Rate, Shape, Span

__all__ = [
    "DEFAULT_CONFIG",
    "SHAPES",
    "FamilySpec",
    "GeneratedEpisode",
    "GeneratorConfig",
    "Rate",
    "Shape",
    "Span",
    "episode_class",
    "family_name",
    "family_seed",
    "generate_family",
    "generated_class",
    "generated_episode",
]
