"""A value no learned condition names is read as the nearest one that does (SQLite, then Postgres;
Milvus Lite and the real embedder)."""

from __future__ import annotations

import pytest
from pymilvus import MilvusClient

from actors.engine.model.templates import Predicate
from cluster.embedding import CachedEmbedder
from cluster.experience.index import MilvusExperienceIndex
from cluster.experience.models import ExperienceQueryResult, Situation
from cluster.experience.service import ExperienceService
from cluster.storage.db import Database

from .factories import template

pytestmark = pytest.mark.milvus

OWNER = "team-a"
SIGNATURE = "agent|tidy||inventory,put|focus,room"
PLACES = {"chest of drawers": ["black blanket", "plaid blanket"], "sink": ["handsoap", "soap bar"]}


def _service(
    database: Database, milvus: MilvusClient, embedder: CachedEmbedder, nearness: float | None
) -> ExperienceService:
    service = ExperienceService(database, MilvusExperienceIndex(milvus), embedder, value_nearness=nearness)
    for target, things in PLACES.items():
        service.add_template(
            OWNER,
            template(
                "put",
                f"holding one of {', '.join(things)}",
                role="agent",
                task_type="tidy",
                signature=SIGNATURE,
                params={"object": "<focus>", "target": target},
                avoid="put",
                predicates=(Predicate(feature="focus", op="in", value=list(things)),),
                rationale=f"put made progress aimed at {target}",
            ),
        )
    return service


def _ask(service: ExperienceService, focus: str) -> ExperienceQueryResult:
    situation = Situation(context_snapshot={"focus": focus, "room": "bedroom"}, available_actions=("put", "inventory"))
    return service.query_experience(OWNER, "", "agent", task_type="tidy", situation=situation)


def _served(result: ExperienceQueryResult) -> dict[str, str | None]:
    """Served target → the nearness shown with it."""
    return {str(e.recommended.params["target"]): e.near for e in result.experiences}


def test_an_unseen_value_is_read_as_the_nearest_learned_one_and_the_answer_says_so(
    database: Database, milvus: MilvusClient, embedder: CachedEmbedder
) -> None:
    service = _service(database, milvus, embedder, 0.7)
    served = _served(_ask(service, "black duvet"))
    assert list(served) == ["chest of drawers"]  # the nearest value's lesson only, not the sink's
    near = served["chest of drawers"]
    assert near is not None
    assert near.startswith("focus: black duvet ≈ black blanket 0.")
    assert float(near.rsplit(" ", 1)[1]) >= 0.7
    # The block a model reads shows it too.
    assert f"[{near}]" in _ask(service, "black duvet").prompt_block
    # A value a condition names is read as itself: no nearness.
    assert _served(_ask(service, "handsoap")) == {"sink": None}
    # Nothing near enough: nothing holds.
    assert _served(_ask(service, "telescope")) == {}
    assert _served(_ask(service, "brown duvet")) == {}  # 0.62 to plaid blanket: under the threshold
    # What it costs: a soap dish is nearest a soap bar, so it is sent to the sink.
    assert list(_served(_ask(service, "soap dish"))) == ["sink"]


def test_without_nearness_an_unseen_value_matches_nothing(
    database: Database, milvus: MilvusClient, embedder: CachedEmbedder
) -> None:
    service = _service(database, milvus, embedder, None)
    assert _served(_ask(service, "black duvet")) == {}
    assert _served(_ask(service, "black blanket")) == {"chest of drawers": None}
