"""The console's JSON: each call answers for the owner of its bearer token, and only for that owner."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from cluster.auth import OwnerResolver
from cluster.http import build_http_app
from tests.e2e.console.conftest import Console
from tests.e2e.console.data import BOB_MEMORY, BOB_TASK, RETRY_TASK

pytestmark = [pytest.mark.milvus]

ALICE = {"Authorization": "Bearer token-alice"}
BOB = {"Authorization": "Bearer token-bob"}


def get(console: Console, path: str, headers: dict[str, str] | None = None, status: int = 200) -> Any:
    response = httpx.get(f"{console.url}/ui/api/{path}", headers=headers or {}, timeout=30)
    assert response.status_code == status, response.text
    return response.json()


def test_every_call_needs_a_known_token(console: Console) -> None:
    for path in ("whoami", "trajectories", "library", "memories", "memory-search?q=tokyo"):
        assert get(console, path, status=401)["error"] == "unauthorized"
        assert (
            get(console, path, {"Authorization": "Bearer not-a-token"}, status=401)["detail"] == "unknown bearer token"
        )
    assert get(console, "whoami", ALICE) == {"owner": "alice", "development_mode": False}


def test_the_page_holds_no_data_and_loads_only_its_own_files(console: Console) -> None:
    page = httpx.get(f"{console.url}/ui/", timeout=30)
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert RETRY_TASK not in page.text
    assert httpx.get(f"{console.url}/ui", timeout=30).headers["location"] == "/ui/"
    assert httpx.get(f"{console.url}/ui/static/app.js", timeout=30).status_code == 200
    assert httpx.get(f"{console.url}/ui/static/reads.py", timeout=30).status_code == 404
    assert httpx.get(f"{console.url}/ui/static/..%2Froutes.py", timeout=30).status_code == 404


def test_an_owner_sees_only_its_own_trajectories(console: Console) -> None:
    mine = {t["task"] for t in get(console, "trajectories", ALICE)["trajectories"]}
    assert RETRY_TASK in mine
    assert BOB_TASK not in mine
    assert [t["task"] for t in get(console, "trajectories", BOB)["trajectories"]] == [BOB_TASK]
    # Bob's trajectory by id, asked with Alice's token, is not found: the id alone opens nothing.
    other = get(console, f"trajectories/{console.seeded.bob_run}", ALICE, status=404)
    assert other["error"] == "not_found"
    assert get(console, f"trajectories/{console.seeded.retry_run}", BOB, status=404)["error"] == "not_found"


def test_a_trajectory_comes_with_its_credit_and_contrasting_siblings(console: Console) -> None:
    t = get(console, f"trajectories/{console.seeded.retry_run}", ALICE)
    by_action = {(n["action"], n["result"]): n for n in t["nodes"]}
    failed, worked = by_action["add_item", "failure"], by_action["bulk_import", "success"]
    assert failed["score"] < 0 < worked["score"]
    assert by_action["open_file", "success"]["score"] is None  # one action available: no decision
    assert failed["parent_id"] == worked["parent_id"]
    assert failed["depth"] == worked["depth"] == 1
    assert failed["x"] != worked["x"]
    siblings = [c for c in t["contrasts"] if c["kind"] == "sibling"]
    assert [(c["good"]["action"], c["bad"]["action"]) for c in siblings] == [("bulk_import", "add_item")]
    assert siblings[0]["good"]["here"]
    assert siblings[0]["bad"]["here"]
    assert t["compared_with"] >= 6
    assert t["templates"], "the bulk-import rule cites this run"


def test_the_library_shows_versions_diff_history_and_provenance(console: Console) -> None:
    lib = get(console, "library", ALICE)
    assert [v["version"] for v in lib["versions"]] == [1, 2]
    assert lib["version"] == lib["active"] == 1
    assert any(t["template_id"] == str(console.seeded.template_id) for t in lib["templates"])
    diff = get(console, "library/diff?a=1&b=2", ALICE)
    assert [(e["confidence_b"] or 0) < (e["confidence_a"] or 0) for e in diff["changed"]] == [True]
    assert diff["added"] == diff["removed"] == []
    template = get(console, f"templates/{console.seeded.template_id}", ALICE)
    assert [c["reason"] for c in template["history"]][-2:] == ["success", "failure"]
    tasks = {p["task"] for p in template["provenance"]}
    assert RETRY_TASK in tasks or any("Import products" in (task or "") for task in tasks)
    assert template["text"].startswith("When ")
    # Bob learned nothing, and cannot read Alice's template or her second version.
    bob = get(console, "library", BOB)
    assert bob["templates"] == []
    assert [v["templates"] for v in bob["versions"]] == [0]
    assert get(console, f"templates/{console.seeded.template_id}", BOB, status=404)["error"] == "not_found"
    assert get(console, "library/diff?a=1&b=2", BOB, status=404)["error"] == "not_found"


def test_memory_versions_and_why_a_memory_matched(console: Console) -> None:
    listed = get(console, "memories", ALICE)["memories"]
    assert {m["key"] for m in listed} == {"timezone", "editor", "report_day"}
    versions = get(console, f"memories/{console.seeded.memory_id}", ALICE)["versions"]
    assert [(v["version"], v["state"]) for v in versions] == [(1, "superseded"), (2, "current")]
    found = get(console, "memory-search?q=where%20does%20the%20user%20live", ALICE)
    top = found["hits"][0]
    assert top["memory"]["key"] == "timezone"
    assert "Tokyo" in top["memory"]["value"]
    assert top["why"]["stages"]
    assert top["why"]["fused"] > 0
    assert BOB_MEMORY not in str(get(console, "memory-search?q=invoices%20blue%20folder", ALICE))
    assert get(console, f"memories/{console.seeded.bob_memory_id}", ALICE, status=404)["error"] == "not_found"
    assert [m["value"] for m in get(console, "memories", BOB)["memories"]] == [BOB_MEMORY]


def test_looking_at_memories_does_not_count_as_using_them(console: Console) -> None:
    before = {m["key"]: m["activity"] for m in get(console, "memories", ALICE)["memories"]}
    for _ in range(3):
        get(console, "memory-search?q=weekly%20report%20friday", ALICE)
    console.services.memory.flush_accesses()
    after = {m["key"]: m["activity"] for m in get(console, "memories", ALICE)["memories"]}
    assert after == before


def test_bad_input_gets_a_short_error(console: Console) -> None:
    assert get(console, "trajectories/not-an-id", ALICE, status=400) == {
        "error": "invalid_input",
        "detail": "trajectory_id: 'not-an-id' is not a UUID",
    }
    assert get(console, "library?version=x", ALICE, status=400)["detail"] == "version: 'x' is not a whole number"
    assert get(console, "library?version=9", ALICE, status=404)["detail"] == "library version 9 not found"
    assert get(console, "memory-search?q=", ALICE, status=400)["detail"].startswith("query: ")


def test_without_tokens_the_console_opens_as_the_local_owner(console: Console) -> None:
    """Development mode (no auth_tokens): no token asked for, and the local owner sees only its own."""
    app = build_http_app(console.services, OwnerResolver({}, "local"))
    with TestClient(app) as http:
        assert http.get("/ui/api/whoami").json() == {"owner": "local", "development_mode": True}
        assert http.get("/ui/api/trajectories").json() == {"trajectories": []}
        assert http.get(f"/ui/api/trajectories/{console.seeded.retry_run}").status_code == 404
