"""Typed value detectors: dates, times, MIME types and fractions are values, not file paths."""

from __future__ import annotations

import pytest

from actors.engine import generalize_params
from actors.engine.generalize import string_kind, value_kind

CASES = {
    "date": [
        "14/03/2026",
        "03/14/2026",
        "2026-03-14",
        "2026/3/4",
        "14.03.2026",
        "3-4-26",
        "14 Mar 2026",
        "March 14, 2026",
        "20260314",
    ],
    "datetime": ["2026-03-14T10:00:00Z", "2026-03-14 10:00", "2026-03-14T10:00:00.123+01:00", "20260314T1000"],
    "time": ["10:30", "23:59:59", "9:05 pm", "7pm", "00:00:00.5"],
    "duration": ["PT5M", "P1DT2H", "P3W", "30s", "2h30m", "1.5 hours", "250ms", "3 days"],
    "mime_type": [
        "image/png",
        "text/csv",
        "application/json",
        "application/vnd.ms-excel",
        "text/html; charset=utf-8",
        "image/*",
        "*/*",
    ],
    "ratio": ["16/9", "3/4", "1:1", "21:9", "2.35:1"],
    "version": ["v2", "v1.2", "1.2.3", "2.0.0-rc.1", "10.4.1.7", "1.2.10"],
    "number": ["42", "3.5", "-0.25", "1,200", "1e6", "40%", ".5"],
}


@pytest.mark.parametrize(("kind", "value"), [(k, v) for k, vs in CASES.items() for v in vs])
def test_each_detector_recognises_its_values(kind: str, value: str) -> None:
    assert value_kind("value", value) == kind
    assert string_kind("value", value) == kind


@pytest.mark.parametrize("value", [v for k in ("date", "time", "mime_type", "ratio", "datetime") for v in CASES[k]])
def test_dates_times_mime_types_and_fractions_are_not_paths(value: str) -> None:
    assert string_kind("file", value) != "path"


@pytest.mark.parametrize(
    "value", ["/tmp/a.csv", "data/raw", "./x", "C:\\data\\x.csv", "products.csv", "text/readme.md", "~/notes.txt"]
)
def test_paths_are_still_paths(value: str) -> None:
    assert value_kind("file", value) is None
    assert string_kind("file", value) == "path"


@pytest.mark.parametrize(
    "value",
    ["utf-8", "Create account", "13/13/2026", "32/01/2026", "abc/def", "v", "1/2/3", "P", "PT"],
)
def test_lookalikes_are_not_typed_values(value: str) -> None:
    assert value_kind("value", value) is None


def test_out_of_range_clock_readings_are_ratios_not_times() -> None:
    assert string_kind("at", "24:00") == "ratio"
    assert string_kind("at", "12:7") == "ratio"


def test_the_key_tells_a_ratio_from_a_time() -> None:
    assert string_kind("aspect_ratio", "16:10") == "ratio"
    assert string_kind("start", "16:10") == "time"


def test_other_kinds_keep_their_precedence() -> None:
    assert string_kind("k", "https://x.test/2026/03/14") == "url"
    assert string_kind("k", "a@b.io") == "email"
    assert string_kind("order_id", "2026-03-14") == "id"
    assert string_kind("k", "123e4567-e89b-12d3-a456-426614174000") == "id"
    assert string_kind("selector", "table.prices") == "css"


def test_a_varying_date_becomes_a_date_placeholder_never_a_path_fragment() -> None:
    samples = [({"due": "14/03/2026"}, {}), ({"due": "02/05/2026"}, {})]
    assert generalize_params(samples) == {"due": "<date>"}
    dotted = [({"due": "14.03.2026"}, {}), ({"due": "02.05.2027"}, {})]
    assert generalize_params(dotted) == {"due": "<date>"}
    assert generalize_params([({"due": "14.03.2026"}, {})]) == {"due": "<date>"}


def test_a_date_from_the_context_is_named_after_it_even_when_constant() -> None:
    ctx = {"task": {"deadline": "14/03/2026"}}
    assert generalize_params([({"due": "14/03/2026"}, ctx), ({"due": "14/03/2026"}, ctx)]) == {"due": "<task.deadline>"}


def test_a_date_every_run_used_outside_the_context_is_kept() -> None:
    assert generalize_params([({"since": "2026-01-01"}, {}), ({"since": "2026-01-01"}, {})]) == {"since": "2026-01-01"}


def test_constant_value_kinds_are_kept_verbatim_and_varying_ones_typed() -> None:
    same = {"mime": "image/png", "aspect": "16/9", "api": "v2", "timeout": "30s", "scale": "1.5"}
    assert generalize_params([(same, {}), (same, {})]) == same
    assert generalize_params([(same, {})]) == same  # one run: still the evidence's constant
    other = {"mime": "text/csv", "aspect": "4/3", "api": "v3", "timeout": "5m", "scale": "2"}
    assert generalize_params([(same, {}), (other, {})]) == {
        "aspect": "<ratio>",
        "api": "<version>",
        "mime": "<mime_type>",
        "scale": "<number>",
        "timeout": "<duration>",
    }


def test_a_varying_typed_value_found_in_the_context_is_named_after_it() -> None:
    samples = [
        ({"type": "image/png"}, {"upload": {"mime": "image/png"}}),
        ({"type": "text/csv"}, {"upload": {"mime": "text/csv"}}),
    ]
    assert generalize_params(samples) == {"type": "<upload.mime>"}


def test_extensions_that_are_not_file_extensions_name_no_placeholder() -> None:
    assert generalize_params([({"f": "/srv/backup.2026"}, {}), ({"f": "/srv/other.2026"}, {})]) == {"f": "<path>"}
    assert generalize_params([({"f": "/a/x.csv"}, {}), ({"f": "/b/y.csv"}, {})]) == {"f": "<csv_path>"}
