"""A new user's first lesson, over MCP with the official client: told what sits just below the
threshold while the evidence is thin, served once four runs agree, and still served, with the
outcome the agent reported, after the hourly consolidation rebuilt the library (shared Ray)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from mcp import Client

from cluster.jobs.runs import JobRuns
from cluster.serve_config import ConsolidateJob, load_serve_config
from cluster.services import Services, analysis_for
from pipelines.jobs import run_job
from tests.e2e.loop import call, send
from tests.unit.engine.builders import insert_run

pytestmark = [pytest.mark.anyio, pytest.mark.ray, pytest.mark.slow, pytest.mark.milvus]

OWNER = "local"
QUESTION = {"context": "Import the supplier's products from a CSV file", "role": "executor"}
DEPLOYMENT = Path(__file__).resolve().parents[2] / "deploy" / "serve.yaml"


def drain(services: Services) -> None:
    analysis = analysis_for(services)
    while analysis.run_once().trajectories:
        pass


async def ask(client: Client) -> tuple[str, dict[str, Any]]:
    """``query_experience`` at its defaults: the text a model reads and the structured answer."""
    result = await client.call_tool("query_experience", QUESTION)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.content[0].text, result.structured_content


async def test_a_lesson_four_runs_agree_on_is_served_and_keeps_its_reported_outcome_through_consolidation(
    ray_session: None, client: Client, services: Services
) -> None:
    # add_item times out on large imports, bulk_import works: two runs, then two more.
    runs = [insert_run(300 + i, "add_item" if i % 2 == 0 else "bulk_import", i % 2 == 1, run=i) for i in range(4)]
    for run in runs[:2]:
        await send(client, run)
    drain(services)

    text, answer = await ask(client)
    assert answer["experiences"] == []
    [candidate] = answer["below_threshold"]["candidates"]
    assert (candidate["recommended"], candidate["avoid"]) == ("bulk_import", "add_item")
    assert text == (
        "No experience matches this situation yet. 1 candidate below 0.70: prefer bulk_import over add_item "
        f"({int(candidate['confidence'] * 100) / 100:.2f})."
    )

    for run in runs[2:]:
        await send(client, run)
    drain(services)

    text, answer = await ask(client)
    [served] = answer["experiences"]
    assert (served["recommended"]["tool"], served["avoid"]["tool"]) == ("bulk_import", "add_item")
    assert text.startswith("[EXPERIENCE]\n1. Prefer bulk_import(")
    assert "avoid add_item(" in text
    assert "below_threshold" not in answer
    report = await call(
        client,
        "report_experience_outcome",
        {"template_ids": [served["id"]], "succeeded": True, "trajectory_id": str(uuid.uuid4())},
    )
    reported = report["changes"][0]["after"]
    assert reported > served["confidence"]

    # The hourly job, as the scheduler runs it (deploy/serve.yaml's parameters, its services).
    job = load_serve_config(DEPLOYMENT).scheduled_jobs()["consolidate"]
    assert isinstance(job, ConsolidateJob)
    runs_table = JobRuns(services.db, "scheduler-test")
    done = await anyio.to_thread.run_sync(
        lambda: run_job(runs_table, services.settings, "consolidate", job, services=services, force=True)
    )
    assert done is not None
    assert done.error is None
    assert done.result is not None
    assert done.result["owners"][OWNER]["promoted"], done.result

    text, answer = await ask(client)
    [kept] = answer["experiences"]
    assert kept["id"] != served["id"]  # the rebuilt version's template
    assert (kept["recommended"]["tool"], kept["avoid"]["tool"]) == ("bulk_import", "add_item")
    assert kept["confidence"] == reported
    rebuilt = services.experience.get_template(OWNER, uuid.UUID(kept["id"]))
    assert rebuilt.belief is not None
    assert (rebuilt.belief.served_ok, rebuilt.belief.served_failed) == (1, 0)
