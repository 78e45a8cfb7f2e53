"""The experience exchange format (docs/experience-format.md): JSON Lines, a header then one template a line.

One writer and one reader, used by ``export_library`` / ``import_library`` and by the Ray Data
reprocess job, so every file a team shares has the same shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from actors.engine.model.templates import ExperienceTemplate
from cluster.core.errors import InvalidInput

EXPORT_FORMAT = "hindsight-experience"
EXPORT_VERSION = 1


def export_lines(templates: Iterable[Mapping[str, Any]], header: Mapping[str, Any]) -> Iterator[str]:
    """The lines of an exchange file: the header (format, version and ``header``'s fields), then
    one ``{"template": ...}`` line per template (each a template dumped with ``mode="json"``)."""
    yield json.dumps({**header, "format": EXPORT_FORMAT, "version": EXPORT_VERSION}, sort_keys=True)
    for template in templates:
        yield json.dumps({"template": template}, sort_keys=True)


def parse_export(lines: Iterable[str]) -> list[ExperienceTemplate]:
    """The templates of an exchange file.

    Raises:
        InvalidInput: missing or unknown header, unsupported version, or a malformed line (named).
    """
    iterator = (line for line in lines if line.strip())
    first = next(iterator, None)
    if first is None:
        raise InvalidInput("empty import: expected a header line")
    try:
        header = json.loads(first)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"line 1: header is not JSON: {exc}") from exc
    if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
        raise InvalidInput(f"line 1: not a {EXPORT_FORMAT} file")
    if header.get("version") != EXPORT_VERSION:
        raise InvalidInput(f"line 1: unsupported {EXPORT_FORMAT} version {header.get('version')!r}")
    templates: list[ExperienceTemplate] = []
    for number, line in enumerate(iterator, start=2):
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or "template" not in record:
                raise InvalidInput("expected an object with a 'template' key")
            templates.append(ExperienceTemplate.model_validate(record["template"]))
        except (json.JSONDecodeError, ValidationError, InvalidInput) as exc:
            raise InvalidInput(f"line {number}: {exc}") from exc
    return templates
