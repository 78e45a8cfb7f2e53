"""Templates in the shape the attribution engine makes, with the fields tests vary."""

from __future__ import annotations

from pydantic import JsonValue

from actors.engine.model.templates import ActionPattern, Condition, ExperienceTemplate, Predicate, Provenance, Support


def template(
    tool: str = "bulk_import",
    when: str = "a product import has more than 20 rows with a uniform schema",
    *,
    role: str = "executor",
    task_type: str | None = "catalog_import",
    rationale: str = "one-by-one add_item times out on large imports",
    confidence: float = 0.9,
    signature: str | None = None,
    params: dict[str, JsonValue] | None = None,
    avoid: str | None = None,
    predicates: tuple[Predicate, ...] = (),
    provenance: tuple[Provenance, ...] = (),
    support: Support | None = None,
) -> ExperienceTemplate:
    """A template in the shape the attribution engine makes, with the fields tests vary."""
    return ExperienceTemplate(
        role=role,
        task_type=task_type,
        signature=signature or f"{role}|{task_type or '*'}|{tool}",
        condition=Condition(description=when, predicates=predicates),
        recommended=ActionPattern(tool=tool, params=params or {}),
        avoid=ActionPattern(tool=avoid) if avoid else None,
        rationale=rationale,
        confidence=confidence,
        provenance=provenance,
        support=support or Support(),
    )
