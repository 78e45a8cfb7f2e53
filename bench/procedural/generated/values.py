"""Made-up names and typed values for generated families.

Names are pronounceable nonsense (``vokar``, ``zemti_lupa``), so a learner cannot lean on what an
English feature or tool name suggests. Typed values come in the formats services really use: a
date as ``14.03.2026``, ``2026-03-14``, ``03/14/2026``, ``14 Mar 2026`` or ``20260314``; times,
datetimes, durations, versions, MIME types, paths, URLs, e-mails, ids, numbers and free text.
"""

from __future__ import annotations

import math
import random
import uuid

from pydantic import JsonValue

from bench.procedural.generated.spec import Feature, ValueKind

CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
CODAS = "nrsk"
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
STYLES: dict[ValueKind, int] = {
    "date": 5,
    "time": 3,
    "datetime": 3,
    "duration": 3,
    "version": 3,
    "mime_type": 3,
    "path": 2,
    "url": 2,
    "email": 2,
    "id": 2,
    "number": 2,
    "text": 1,
}
"""How many formats each value kind comes in (a feature's or constant's ``style`` picks one)."""
RESERVED = frozenset(
    """
    base basin bike bonus case code cover data date decide define demo dine file files fine fire
    focus gate kilo lake lane late latin lemon line linen live lone love made make male melon memo
    menu mime mine minus mobile mode mole more motor name nine node none nose note page pages pale
    paper pine pole polar pose radar rage rake rate refine resize resume ride rise robin role rope
    rose rule safe sale salon same save side site size sofa solar solo some sonar super take tale
    tape time timer token tone tune vase veto virus vote zero zone
    """.split()
)
"""English words the syllables can spell, those of the hand-written families among them: never names."""


def pseudo_word(rng: random.Random, syllables: int = 2) -> str:
    """A pronounceable nonsense word of consonant-vowel syllables, sometimes with a closing consonant."""
    word = "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(syllables))
    return word + rng.choice(CODAS) if rng.random() < 0.3 else word


class Namer:
    """Draws words no other name of the same family uses.

    Args:
        rng: The family's random source.
    """

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._used: set[str] = set()

    def word(self) -> str:
        """A fresh word of two or three syllables."""
        while True:
            word = pseudo_word(self._rng, self._rng.choice((2, 2, 3)))
            if word not in self._used and word not in RESERVED:
                self._used.add(word)
                return word

    def name(self, parts: int = 2) -> str:
        """A fresh snake_case name of ``parts`` words (a tool, a feature)."""
        return "_".join(self.word() for _ in range(parts))

    def phrase(self, words: int) -> str:
        """Words joined by spaces (goals, messages); not reserved."""
        return " ".join(pseudo_word(self._rng, self._rng.choice((1, 2, 3))) for _ in range(words))


def _hex(rng: random.Random, n: int) -> str:
    digits = [rng.choice("0123456789abcdef") for _ in range(n)]
    digits[rng.randrange(n)] = rng.choice("0123456789")  # a digit, so it reads as hex and not a word
    return "".join(digits)


def typed_value(kind: ValueKind, style: int, rng: random.Random, ext: str = "dat") -> JsonValue:
    """One value of ``kind`` in format ``style`` (``style % STYLES[kind]``).

    Args:
        kind: What the value is.
        style: Which format.
        rng: Random source (the family's for constants, the instance's for varying values).
        ext: File extension for paths, so one family's paths share it.
    """
    style %= STYLES[kind]
    year, month, day = rng.randint(2024, 2027), rng.randint(1, 12), rng.randint(1, 28)
    hour, minute, second = rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)
    iso_date = f"{year}-{month:02d}-{day:02d}"
    if kind == "date":
        return (
            f"{day:02d}.{month:02d}.{year}",
            iso_date,
            f"{month:02d}/{day:02d}/{year}",
            f"{day} {MONTHS[month - 1]} {year}",
            f"{year}{month:02d}{day:02d}",
        )[style]
    if kind == "time":
        twelve = hour % 12 or 12
        return (
            f"{hour:02d}:{minute:02d}",
            f"{hour:02d}:{minute:02d}:{second:02d}",
            f"{twelve}:{minute:02d} {'PM' if hour >= 12 else 'AM'}",
        )[style]
    if kind == "datetime":
        return (
            f"{iso_date}T{hour:02d}:{minute:02d}:00Z",
            f"{iso_date} {hour:02d}:{minute:02d}",
            f"{iso_date}T{hour:02d}:{minute:02d}:{second:02d}+01:00",
        )[style]
    if kind == "duration":
        minutes = rng.randint(1, 600)
        iso = f"PT{minutes // 60}H{minutes % 60}M" if minutes >= 60 and minutes % 60 else f"PT{minutes}M"
        return (iso, f"{rng.randint(5, 3600)}s", f"{rng.randint(1, 72)}h")[style]
    if kind == "version":
        major, minor, patch = rng.randint(0, 12), rng.randint(0, 30), rng.randint(0, 40)
        return (f"v{major}.{minor}.{patch}", f"{major}.{minor}.{patch}", f"{major}.{minor}.{patch}-rc.{patch % 5 + 1}")[
            style
        ]
    word, other = pseudo_word(rng), pseudo_word(rng)
    if kind == "mime_type":
        return (f"application/vnd.{word}+json", f"application/x-{word}", f"text/x-{word}")[style]
    if kind == "path":
        return (f"/srv/{word}/{other}.{ext}", f"{word}/{other}_{_hex(rng, 4)}.{ext}")[style]
    if kind == "url":
        return (f"https://{word}.example/{other}/{_hex(rng, 6)}", f"https://api.{word}.example/v2/{other}")[style]
    if kind == "email":
        return (f"{word}@{other}.example", f"{word}.{other}@{pseudo_word(rng)}.example")[style]
    if kind == "id":
        return (str(uuid.UUID(int=rng.getrandbits(128), version=4)), _hex(rng, 16))[style]
    if kind == "number":
        return rng.randint(1, 5000) if style == 0 else round(rng.uniform(0.5, 999.0), 2)
    words: list[str] = []
    while len(" ".join(words)) < 70:
        words.append(pseudo_word(rng, rng.choice((1, 2, 3))))
    return " ".join(words).capitalize() + "."


def _position(feature: Feature, q: float) -> float:
    if feature.log_scale:
        return math.exp(math.log(feature.low) + q * (math.log(feature.high) - math.log(feature.low)))
    return feature.low + q * (feature.high - feature.low)


def quantile(feature: Feature, q: float) -> float:
    """A round cut below which about a share ``q`` of a number feature's draws fall."""
    value = _position(feature, q)
    return float(round(value)) if feature.integer else round(value, 1)


def draw(feature: Feature, rng: random.Random) -> JsonValue:
    """One instance's value of ``feature``."""
    if feature.kind == "category":
        return rng.choice(feature.values)
    if feature.kind == "flag":
        return rng.random() < feature.p_true
    if feature.kind == "number":
        value = _position(feature, rng.random())
        return round(value) if feature.integer else round(value, 2)
    if feature.value_kind is None:
        raise ValueError(f"typed feature {feature.name!r} has no value_kind")
    return typed_value(feature.value_kind, feature.style, rng, ext=extension(feature.name))


def extension(name: str) -> str:
    """A file extension made from a feature's name, so its paths share one per family."""
    letters = [c for c in name if c.isalpha()]
    return "".join(letters[:3]) or "dat"
