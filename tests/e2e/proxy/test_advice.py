"""Serving without code: what hindsight learned from proxied calls comes back through hindsight_advice,
and the served experiences' outcome is reported when the task closes."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from cluster.proxy.config import ProxyConfig
from cluster.services import Services, analysis_for
from tests.e2e.proxy.conftest import config, finalized, in_process, proxied

pytestmark = pytest.mark.anyio


async def _learn(cfg: ProxyConfig, files: Path, services: Services) -> None:
    """Proxied tasks where a wrong guess fails and looking first succeeds, then one analysis pass."""
    for _ in range(3):
        async with proxied(cfg, in_process(services)) as client:
            await client.call_tool("read_text_file", {"path": str(files / "note.txt")})
        async with proxied(cfg, in_process(services)) as client:
            await client.call_tool("list_directory", {"path": str(files)})
            await client.call_tool("read_text_file", {"path": str(files / "notes.txt")})
    assert analysis_for(services).run_once().templates >= 1


async def test_advice_serves_what_proxied_tasks_taught_and_finalize_reports_it(
    tmp_path: Path, services: Services
) -> None:
    cfg = config(tmp_path, task="read the notes file")
    files = tmp_path / "files"
    await _learn(cfg, files, services)

    async with proxied(cfg, in_process(services)) as client:
        advice = await client.call_tool("hindsight_advice", {})
        text = advice.content[0].text  # type: ignore[union-attr]
        assert not advice.is_error
        # With a condition ("When len(recent) <= 0, prefer ...") or, when measured latencies make
        # both look workable, without one ("Prefer ...").
        assert "prefer list_directory" in text.lower()
        assert "avoid read_text_file" in text
        assert advice.structured_content is not None  # the same answer as query_experience's, for code
        [served] = advice.structured_content["experiences"]
        await client.call_tool("list_directory", {"path": str(files)})
        await client.call_tool("hindsight_finalize", {"outcome": "success"})
    last = finalized(services.db)[-1]
    assert last.outcome is not None
    assert [str(i) for i in last.outcome.served_template_ids] == [served["id"]]
    # The agent followed it (its next call was the tool it recommends) and the task succeeded: the
    # proxy reported that for this trajectory, so the same report again counts for nothing.
    again = services.experience.report_outcome("local", [uuid.UUID(served["id"])], True, last.trajectory_id)
    assert again.already_counted == (uuid.UUID(served["id"]),)


async def test_advice_in_descriptions_rides_on_the_recommended_tool_and_is_reported(
    tmp_path: Path, services: Services
) -> None:
    files = tmp_path / "files"
    await _learn(config(tmp_path, task="read the notes file"), files, services)
    plain = config(tmp_path, task="read the notes file", advice="off")
    async with proxied(plain, in_process(services)) as client:
        undecorated = {t.name: t.description for t in (await client.list_tools()).tools}

    cfg = config(tmp_path, task="read the notes file", advice="descriptions")
    async with proxied(cfg, in_process(services)) as client:
        tools = {t.name: t.description or "" for t in (await client.list_tools()).tools}
        await client.call_tool("list_directory", {"path": str(files)})
        await client.call_tool("hindsight_finalize", {"outcome": "success"})

    assert "hindsight_advice" not in tools
    own, learned = tools["list_directory"].split("\n\nLearned from earlier tasks: ")
    assert own == undecorated["list_directory"]
    assert "prefer list_directory" in learned.lower()
    assert {name: d for name, d in tools.items() if name != "list_directory"} == {
        name: d for name, d in undecorated.items() if name != "list_directory"
    }
    last = finalized(services.db)[-1]
    assert last.outcome is not None
    assert len(last.outcome.served_template_ids) == 1
