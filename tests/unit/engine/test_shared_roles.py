"""Shared role libraries: which roles pool, and what pooling teaches that separate roles cannot."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from actors.engine import attribute_batch
from actors.engine.model.trajectories import Trajectory
from cluster.experience.models import RoleLibraries
from cluster.experience.roles import pooled_roles
from cluster.settings import Settings
from tests.unit.engine.fleet_roles import SHARED, regional_fleet


def lessons(trajectories: list[Trajectory]) -> set[tuple[str, str, str | None]]:
    results = attribute_batch(trajectories)
    return {(t.role, t.recommended.tool, t.avoid and t.avoid.tool) for r in results for t in r.templates}


def test_a_role_maps_to_its_library_and_unlisted_roles_keep_their_own() -> None:
    assert SHARED.library("deployer-eu") == "deployer"
    assert SHARED.library("deployer") == "deployer"
    assert SHARED.library("verifier") == "verifier"
    assert SHARED.served_roles("deployer-us") == ("deployer", "deployer-eu", "deployer-us")
    assert SHARED.served_roles("verifier") == ("verifier",)
    assert RoleLibraries().library("anything") == "anything"


@pytest.mark.parametrize(
    ("shared", "message"),
    [
        ({"a": ("x",), "b": ("x",)}, "role 'x' is in two shared libraries"),
        ({"a": ()}, "lists no role"),
        ({"a": ("b",), "b": ("c",)}, "role 'b' is itself a shared library's name"),
        ({"a": ("",)}, "at least 1 character"),
    ],
)
def test_a_role_in_two_libraries_or_an_empty_library_is_refused(
    shared: dict[str, tuple[str, ...]], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        RoleLibraries(shared=shared)


def test_the_setting_is_checked_at_start_and_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValidationError, match="two shared libraries"):
        Settings(shared_roles={"a": ["x"], "b": ["x"]})
    monkeypatch.setenv("HINDSIGHT_SHARED_ROLES", '{"deployer": ["deployer-eu", "deployer-us"]}')
    assert Settings().role_libraries() == SHARED


def test_pooling_rewrites_only_the_role_of_shared_trajectories() -> None:
    fleet = regional_fleet()
    pooled = pooled_roles(fleet, SHARED)
    assert [t.header.role for t in pooled] == ["deployer"] * len(fleet)
    assert [t.trajectory_id for t in pooled] == [t.trajectory_id for t in fleet]
    assert [t.header.agent_id for t in pooled] == [t.header.agent_id for t in fleet]
    assert [t.nodes for t in pooled] == [t.nodes for t in fleet]
    assert pooled_roles(fleet, RoleLibraries()) == fleet
    assert pooled_roles(fleet, RoleLibraries(shared={"planner": ("planner-b",)})) == fleet


def test_only_the_shared_library_learns_what_one_region_did_wrong_and_the_other_right() -> None:
    fleet = regional_fleet()
    regions = ("deployer-eu", "deployer-us")
    apart = set().union(*(lessons([t for t in fleet if t.header.role == role]) for role in regions))
    assert not any(recommended == "rolling_restart" and avoid == "restart_all" for _, recommended, avoid in apart)
    assert lessons(pooled_roles(fleet, SHARED)) == {("deployer", "rolling_restart", "restart_all")}
