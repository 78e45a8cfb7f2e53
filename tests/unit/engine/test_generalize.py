from __future__ import annotations

from actors.engine import generalize_params
from actors.engine.generalize import sanitize_text, string_kind


def test_paths_urls_ids_and_emails_become_placeholders() -> None:
    samples = [
        (
            {
                "file": "/tmp/run-1/a.csv",
                "url": "https://x.test/a?id=3",
                "order_id": 991,
                "token": "9f8e7d6c5b4a3f2e",
                "mail": "a@b.io",
            },
            {},
        ),
        (
            {
                "file": "/data/b.csv",
                "url": "https://x.test/b",
                "order_id": 12,
                "token": "0a1b2c3d4e5f6a7b",
                "mail": "c@d.io",
            },
            {},
        ),
    ]
    assert generalize_params(samples) == {
        "file": "<csv_path>",
        "url": "<url>",
        "order_id": "<id>",
        "token": "<id>",
        "mail": "<email>",
    }


def test_mixed_extensions_give_a_plain_path_placeholder() -> None:
    assert generalize_params([({"f": "/a/x.csv"}, {}), ({"f": "/a/y.json"}, {})]) == {"f": "<path>"}


def test_constants_shared_by_all_runs_are_kept_and_varying_values_are_typed() -> None:
    samples = [
        ({"encoding": "utf-8", "batch": 500, "dry_run": False, "name": "alpha", "ratio": 0.5}, {}),
        ({"encoding": "utf-8", "batch": 500, "dry_run": True, "name": "beta", "ratio": 0.7}, {}),
    ]
    assert generalize_params(samples) == {
        "encoding": "utf-8",
        "batch": 500,
        "dry_run": "<bool>",
        "name": "<str>",
        "ratio": "<number>",
    }


def test_a_number_that_tracks_a_context_feature_becomes_that_feature() -> None:
    samples = [({"count": 150}, {"table": {"rows": 150}}), ({"count": 20}, {"table": {"rows": 20}})]
    assert generalize_params(samples) == {"count": "<table.rows>"}


def test_keys_missing_from_some_runs_are_dropped_and_nesting_is_kept() -> None:
    samples = [
        ({"opts": {"sep": ",", "path": "/x/y.csv"}, "extra": 1}, {}),
        ({"opts": {"sep": ",", "path": "/z.csv"}}, {}),
    ]
    assert generalize_params(samples) == {"opts": {"path": "<csv_path>", "sep": ","}}


def test_attribute_selector_comes_from_an_attributes_mapping_in_the_context() -> None:
    ctx = {"dom": [{"id": "login-1", "attributes": {"name": "login"}}]}
    assert generalize_params([({"selector": "button#login-1"}, ctx)]) == {"selector": "[name=login]"}


def test_single_run_ids_and_paths_are_still_generalized() -> None:
    params = {"id": "42", "path": "products.csv", "sel": "#go", "note": "x" * 100}
    assert generalize_params([(params, {})]) == {
        "id": "<id>",
        "path": "<csv_path>",
        "sel": "<css_selector>",
        "note": "<text>",
    }


def test_string_kinds() -> None:
    assert string_kind("k", "utf-8") == "plain"
    assert string_kind("k", "C:\\data\\x.csv") == "path"
    assert string_kind("valid", "yes") == "plain"  # 'valid' is not an id key
    assert string_kind("userId", "u") == "id"


def test_sanitize_text_strips_run_specific_values() -> None:
    text = "decode error in /tmp/run-3/x.csv at https://h.test/a for 123e4567-e89b-12d3-a456-426614174000 #btn"
    assert sanitize_text(text) == "decode error in <path> at <url> for <id> <css_selector>"
