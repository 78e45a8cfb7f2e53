"""The environments enforce their hidden rules and are reproducible from their seed."""

from __future__ import annotations

from typing import Any

import pytest

from cluster.demo.env_base import Call, Episode
from cluster.demo.envs import (
    FAMILIES,
    CsvExport,
    DataSync,
    DbInsert,
    FormSubmit,
    ProductImport,
    TableLookup,
    make_episode,
)


def call(action: str, **params: Any) -> Call:
    return Call(action=action, params=params)


def at_stage(episode: Episode, stage: str) -> Episode:
    """Advance with the options a correct agent would pick until ``stage`` is reached."""
    while episode.stage != stage:
        view = episode.view()
        assert view is not None
        assert episode.act(view.options[0]).status == "success"
    return episode


def solve_stage(episode: Episode, options: tuple[Call, ...]) -> bool:
    """Try the naive options in order until one works; a few passes, for the flaky geocoder."""
    return any(episode.act(option).status == "success" for _ in range(4) for option in options)


def snapshot(episode: Episode) -> tuple[str, dict[str, Any]]:
    view = episode.view()
    assert view is not None
    return episode.task, view.model_dump()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_same_seed_gives_the_same_instance_and_other_seeds_differ(family: str) -> None:
    assert snapshot(make_episode(family, 7)) == snapshot(make_episode(family, 7))
    assert len({make_episode(family, seed).task for seed in range(20)}) > 1


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_instance_is_solvable_and_each_stage_keeps_its_context_keys(family: str) -> None:
    shapes: dict[str, set[tuple[str, ...]]] = {}
    for seed in range(15):
        episode = make_episode(family, seed, budget=100)
        while (view := episode.view()) is not None:
            shapes.setdefault(view.stage, set()).add(tuple(sorted(view.context)))
            # Trying the naive options in order always finds one that works.
            assert solve_stage(episode, view.options)
        assert episode.succeeded
    assert all(len(keys) == 1 for keys in shapes.values()), shapes


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_has_a_decision_after_an_execution_step(family: str) -> None:
    episode = make_episode(family, 0, budget=100)
    first = episode.view()
    assert first is not None
    assert not first.is_decision
    decisions = 0
    while (view := episode.view()) is not None:
        decisions += view.is_decision
        assert solve_stage(episode, view.options)
    assert decisions >= 1


def test_form_submit_needs_the_submit_control_whatever_its_id() -> None:
    episode = at_stage(FormSubmit(3), "submit")
    assert isinstance(episode, FormSubmit)
    episode.fields, episode.page_tech = 3, "spa"
    submit = next(b for b in episode.buttons if b["type"] == "submit")
    other = next(b for b in episode.buttons if b["type"] != "submit")
    assert episode.act(call("click", selector="#submit-btn")).status == "failure"
    assert episode.act(call("click", selector=f"#{other['id']}")).status == "partial"
    assert episode.act(call("press_enter")).status == "failure"
    assert episode.act(call("submit_form_js")).status == "failure"
    assert episode.act(call("click", selector="[type=submit]")).status == "success"
    assert episode.succeeded
    again = at_stage(FormSubmit(3), "submit")
    assert again.act(call("click", selector=f"#{submit['id']}")).status == "success"


def test_submit_ids_differ_between_pages() -> None:
    ids = {b["id"] for seed in range(10) for b in FormSubmit(seed).buttons if b["type"] == "submit"}
    assert len(ids) == 10


def test_form_shortcuts_work_only_where_the_page_allows_them() -> None:
    episode = at_stage(FormSubmit(4), "submit")
    assert isinstance(episode, FormSubmit)
    episode.fields, episode.page_tech = 1, "static"
    assert episode.act(call("press_enter")).status == "success"
    legacy = at_stage(FormSubmit(4), "submit")
    assert isinstance(legacy, FormSubmit)
    legacy.fields, legacy.page_tech = 4, "static"
    assert legacy.act(call("submit_form_js")).status == "success"


@pytest.mark.parametrize(
    ("rows", "uniform", "works"), [(120, True, {"bulk_import"}), (8, False, {"add_item", "paste_into_grid"})]
)
def test_product_import_method_depends_on_row_count_and_schema(rows: int, uniform: bool, works: set[str]) -> None:
    for action in ("bulk_import", "add_item", "paste_into_grid", "upload_via_api", "import_via_sftp"):
        episode = at_stage(ProductImport(1), "import")
        assert isinstance(episode, ProductImport)
        episode.row_count, episode.schema_uniform = rows, uniform
        params: dict[str, Any] = (
            {"file": episode.file, "rows": rows} if action == "add_item" else {"file": episode.file}
        )
        status = episode.act(Call(action=action, params=params)).status
        assert (status == "success") == (action in works), (action, status)


def test_product_import_rejects_another_instances_file() -> None:
    episode = at_stage(ProductImport(1), "import")
    assert isinstance(episode, ProductImport)
    episode.row_count, episode.schema_uniform = 200, True
    assert episode.act(call("bulk_import", file="imports/products_000000.csv")).status == "failure"
    assert episode.act(call("bulk_import", file=episode.file)).status == "success"


def test_csv_export_must_be_utf8_when_the_data_is_not_ascii() -> None:
    episode = at_stage(CsvExport(2), "export")
    assert isinstance(episode, CsvExport)
    episode.has_non_ascii, episode.default_encoding = True, "latin-1"
    assert episode.act(call("export_csv", path=episode.path)).status == "failure"
    assert episode.act(call("set_encoding", encoding="utf-16")).status == "failure"
    assert episode.act(call("export_xlsx", path="x.xlsx")).status == "failure"
    assert episode.act(call("set_encoding", encoding="utf-8")).status == "success"
    assert episode.act(call("export_csv", path=episode.path)).status == "success"
    assert episode.succeeded
    ascii_only = at_stage(CsvExport(2), "export")
    assert isinstance(ascii_only, CsvExport)
    ascii_only.has_non_ascii, ascii_only.default_encoding = False, "latin-1"
    assert ascii_only.act(call("export_csv", path=ascii_only.path)).status == "success"


def test_batch_insert_needs_escaped_quotes_and_row_by_row_times_out() -> None:
    episode = at_stage(DbInsert(5), "insert")
    assert isinstance(episode, DbInsert)
    episode.has_quotes, episode.row_count = True, 500
    assert episode.act(call("batch_insert", table=episode.table, batch_size=500)).status == "failure"
    assert episode.act(call("insert_row_by_row", table=episode.table)).status == "failure"
    assert episode.act(call("escape_quotes")).status == "success"
    assert episode.stage == "insert_escaped"
    assert episode.act(call("batch_insert", table=episode.table, batch_size=500)).status == "success"
    small = at_stage(DbInsert(5), "insert")
    assert isinstance(small, DbInsert)
    small.has_quotes, small.row_count = True, 40
    assert small.act(call("insert_row_by_row", table=small.table)).status == "success"


@pytest.mark.parametrize(("page_kind", "works"), [("legacy", "find_by_xpath"), ("modern", "find_by_css")])
def test_table_lookup_locator_depends_on_the_page_kind(page_kind: str, works: str) -> None:
    for action in ("find_by_xpath", "find_by_css"):
        episode = at_stage(TableLookup(6), "locate")
        assert isinstance(episode, TableLookup)
        episode.page_kind, episode.tables = page_kind, 3
        assert (episode.act(call(action)).status == "success") == (action == works)


def test_paginated_tables_need_every_page() -> None:
    episode = at_stage(TableLookup(6), "locate")
    assert isinstance(episode, TableLookup)
    episode.page_kind, episode.paginated = "modern", True
    assert episode.act(call("find_by_css", selector="table.prices")).status == "success"
    assert episode.act(call("extract_rows")).status == "failure"
    assert episode.act(call("extract_all_pages", max_pages=50)).status == "success"
    assert episode.succeeded


def test_data_sync_splits_planner_executor_and_verifier_decisions() -> None:
    episode = DataSync(9)
    episode.row_count, episode.live_writes, episode.target_dedups = 20_000, False, True
    episode.peak_hours, episode.replica_lag_s = True, 10
    roles = []
    script = [
        call("read_request", job_id=episode.job),
        call("plan_incremental", batch_rows=500),
        call("plan_bulk"),
        call("claim_job", job_id=episode.job),
        call("run_in_place", job_id=episode.job),
        call("run_on_replica", job_id=episode.job),
        call("load_report", job_id=episode.job),
        call("verify_count"),
        call("verify_sample", size=200),
    ]
    statuses = []
    for step in script:
        view = episode.view()
        assert view is not None
        roles.append(view.role)
        statuses.append(episode.act(step).status)
    assert roles == ["planner"] * 3 + ["executor"] * 3 + ["verifier"] * 3
    assert statuses == [
        "success",
        "failure",
        "success",
        "success",
        "failure",
        "success",
        "success",
        "failure",
        "success",
    ]
    assert episode.succeeded


def test_the_budget_ends_an_episode_as_a_failure() -> None:
    episode = make_episode("product_import", 0, budget=2)
    view = episode.view()
    assert view is not None
    episode.act(call("open_file", file="wrong.csv"))
    episode.act(call("open_file", file="wrong.csv"))
    assert episode.done
    assert not episode.succeeded
    assert episode.view() is None
    with pytest.raises(RuntimeError, match="over"):
        episode.act(call("open_file", file="wrong.csv"))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_decoy_tools_never_work(family: str) -> None:
    episode = make_episode(family, 11, budget=100)
    decoys = {action for stage in episode.decoys.values() for action, _ in stage}
    assert decoys
    while (view := episode.view()) is not None:
        for action in set(view.available_actions) & decoys:
            assert episode.act(call(action)).status == "failure"
        assert solve_stage(episode, view.options)
    assert episode.succeeded
