"""The experience library service: query, learn, feedback, manual authoring, export/import, reindex.

``ExperienceService`` lives in :mod:`cluster.experience.service`; it is resolved lazily here because
the SQL store imports this package's models.
"""

from typing import Any

from cluster.experience.models import (
    ConfidenceChange,
    ConfidenceReason,
    ExperienceQueryResult,
    ImportReport,
    LearnReport,
    OutcomeReport,
    ScoredTemplate,
    TemplateEdit,
)

__all__ = [
    "ConfidenceChange",
    "ConfidenceReason",
    "ExperienceQueryResult",
    "ExperienceService",
    "ImportReport",
    "LearnReport",
    "OutcomeReport",
    "ScoredTemplate",
    "TemplateEdit",
    "build_experience_service",
]


def __getattr__(name: str) -> Any:
    if name in ("ExperienceService", "build_experience_service"):
        from cluster.experience import service

        return getattr(service, name)
    raise AttributeError(name)
