"""Shared role libraries through the real store (SQLite and Postgres) and Milvus Lite: two regional
roles that share a library learn, from each other's evidence, a lesson neither holds alone, and an
agent of either role (or of the library's role) is served it."""

from __future__ import annotations

import pytest

from cluster.analysis import AnalysisService
from cluster.embedding.cache import CachedEmbedder
from cluster.experience.index import MilvusExperienceIndex
from cluster.experience.models import RoleLibraries
from cluster.experience.service import ExperienceService
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.trajectories.repository import NO_HOLD, SqlTrajectoryStore
from pipelines.evaluate_job import load_trajectories
from tests.integration.experience.test_cross_role import OWNER, drain, library, store
from tests.unit.engine.fleet_roles import SHARED, deploy, regional_fleet

pytestmark = pytest.mark.milvus


def serving(experience: ExperienceService, roles: RoleLibraries) -> ExperienceService:
    index = experience.index
    assert isinstance(index, MilvusExperienceIndex)
    assert isinstance(experience.embedder, CachedEmbedder)
    return ExperienceService(experience.db, index, experience.embedder, roles=roles)


def served_tools(experience: ExperienceService, role: str) -> set[tuple[str, str | None]]:
    answer = experience.query_experience(OWNER, "roll out the build", role=role, task_type="deploy", min_confidence=0.0)
    return {(s.template.recommended.tool, s.template.avoid and s.template.avoid.tool) for s in answer.templates}


def test_roles_sharing_a_library_learn_from_each_other_and_are_served_alike(
    database: Database, experience: ExperienceService
) -> None:
    ids = store(database, regional_fleet())
    shared = serving(experience, SHARED)
    assert drain(AnalysisService(database, shared, batch_size=50, run_hold=NO_HOLD, roles=SHARED)) == len(ids)
    templates = library(database)
    assert {(t.role, t.recommended.tool, t.avoid and t.avoid.tool) for t in templates} == {
        ("deployer", "rolling_restart", "restart_all")
    }
    for role in ("deployer-eu", "deployer-us", "deployer"):
        assert served_tools(shared, role) == {("rolling_restart", "restart_all")}, role
    assert served_tools(shared, "verifier") == set()
    # Without the setting the library is the deployer role's own: a regional agent is not served it.
    assert served_tools(experience, "deployer-eu") == set()
    assert served_tools(experience, "deployer") == {("rolling_restart", "restart_all")}


def test_roles_apart_learn_nothing_from_each_other(database: Database, experience: ExperienceService) -> None:
    store(database, regional_fleet())
    drain(AnalysisService(database, experience, batch_size=50, run_hold=NO_HOLD))
    assert not any(t.recommended.tool == "rolling_restart" and t.avoid for t in library(database))


def test_one_trajectory_at_a_time_pools_through_the_shared_history(
    database: Database, experience: ExperienceService
) -> None:
    store(database, regional_fleet())
    shared = serving(experience, SHARED)
    # Batches of one: every later trajectory meets the other region's through the stored history.
    drain(AnalysisService(database, shared, batch_size=1, run_hold=NO_HOLD, roles=SHARED))
    assert ("rolling_restart", "restart_all") in {
        (t.recommended.tool, t.avoid and t.avoid.tool) for t in library(database) if t.role == "deployer"
    }


def test_what_a_member_role_learned_alone_is_served_to_the_whole_library_once_shared(
    database: Database, experience: ExperienceService
) -> None:
    us = [deploy("deployer-us", "rolling_restart", True, i) for i in range(3)]
    us += [deploy("deployer-us", "restart_all", False, i) for i in range(3)]
    store(database, us)
    drain(AnalysisService(database, experience, batch_size=50, run_hold=NO_HOLD))
    assert {t.role for t in library(database)} == {"deployer-us"}
    assert served_tools(experience, "deployer-eu") == set()
    # Learned before the roles shared a library, it reaches the EU role at once, not after a rebuild.
    assert served_tools(serving(experience, SHARED), "deployer-eu") == {("rolling_restart", "restart_all")}


def test_batch_jobs_read_the_shared_roles_as_one_group(database: Database) -> None:
    fleet = regional_fleet()
    store(database, fleet)
    with database.read() as session:
        groups = SqlTrajectoryStore(session).finalized_groups(OWNER, SHARED)
        apart = SqlTrajectoryStore(session).finalized_groups(OWNER)
    assert list(groups) == [(OWNER, "deployer", "deploy")]
    assert groups[(OWNER, "deployer", "deploy")] == [t.trajectory_id for t in fleet]
    assert sorted(apart) == [(OWNER, "deployer-eu", "deploy"), (OWNER, "deployer-us", "deploy")]
    settings = Settings(database_url=database.url, shared_roles={"deployer": ["deployer-eu", "deployer-us"]})
    loaded = load_trajectories(settings, OWNER)[OWNER]
    assert {t.header.role for t in loaded} == {"deployer"}
    assert sorted(t.trajectory_id for t in loaded) == sorted(t.trajectory_id for t in fleet)
