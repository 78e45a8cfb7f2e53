from __future__ import annotations

from actors.engine import generalize_params
from actors.engine.generalize import merge_params, sanitize_text, string_kind


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


def test_a_url_is_the_situations_or_a_constant_of_the_tool() -> None:
    endpoint = "https://api.example.test/v2/upload"
    page = {"page": {"url": "https://shop.test/p/1"}}
    other = {"page": {"url": "https://shop.test/p/2"}}
    # Every run posted to one endpoint no context holds: the tool's constant, kept for the follower.
    assert generalize_params([({"to": endpoint}, {}), ({"to": endpoint}, {})]) == {"to": endpoint}
    # The situation's URL, whether or not it varied, is named after the feature holding it.
    same = [({"open": "https://shop.test/p/1"}, page), ({"open": "https://shop.test/p/1"}, page)]
    assert generalize_params(same) == {"open": "<page.url>"}
    varied = [({"open": "https://shop.test/p/1"}, page), ({"open": "https://shop.test/p/2"}, other)]
    assert generalize_params(varied) == {"open": "<page.url>"}
    # One run is no evidence of a constant; the same address of a person or a file never is.
    assert generalize_params([({"to": endpoint}, {})]) == {"to": "<url>"}
    mail = [({"to": "a@b.io", "f": "/etc/x.yaml"}, {}), ({"to": "a@b.io", "f": "/etc/x.yaml"}, {})]
    assert generalize_params(mail) == {"to": "<email>", "f": "<yaml_path>"}


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


def _form(button_id: str, other_id: str = "btn-0a0a01") -> dict[str, object]:
    return {
        "fields": 3,
        "elements": [
            {"id": other_id, "type": "button", "text": "Cancel"},
            {"id": button_id, "type": "submit", "text": "Send"},
        ],
    }


def test_ids_of_submit_buttons_mixed_with_the_attribute_selector_keep_the_attribute_selector() -> None:
    samples = [
        ({"selector": "#btn-3f9a1c"}, _form("btn-3f9a1c")),
        ({"selector": "[type=submit]"}, _form("btn-77b2e0")),
        ({"selector": "#btn-a0c4d2"}, _form("btn-a0c4d2")),
        ({"selector": "[type=submit]"}, _form("btn-19ce55")),
    ]
    assert generalize_params(samples) == {"selector": "[type=submit]"}


def test_an_id_whose_element_lacks_the_attribute_makes_a_mixed_selector_a_placeholder() -> None:
    samples = [({"selector": "#btn-0a0a01"}, _form("btn-3f9a1c")), ({"selector": "[type=submit]"}, _form("btn-77"))]
    assert generalize_params(samples) == {"selector": "<css_selector>"}


def test_generalization_never_yields_an_empty_string() -> None:
    assert generalize_params([({"selector": ""}, {}), ({"selector": ""}, {})]) == {"selector": "<str>"}
    mixed = [({"selector": "#x-1"}, {}), ({"selector": "[type=submit]"}, {}), ({"selector": ""}, {})]
    assert generalize_params(mixed)["selector"] not in ("", None)


def test_a_value_found_in_a_context_list_becomes_a_placeholder_named_after_it_even_from_one_run() -> None:
    params = {"table": "staging_88ac38", "batch_size": 500}
    context = {"row_count": 300, "tables": ["staging_88ac38"]}
    assert generalize_params([(params, context)]) == {"batch_size": 500, "table": "<table>"}


def test_strings_that_track_a_nested_context_value_become_that_feature() -> None:
    samples = [({"user": "alice"}, {"account": {"owner": "alice"}}), ({"user": "bob"}, {"account": {"owner": "bob"}})]
    assert generalize_params(samples) == {"user": "<account.owner>"}


def test_a_per_instance_token_outside_the_context_becomes_a_typed_placeholder() -> None:
    assert generalize_params([({"table": "staging_88ac38", "queue": "jobs-4f2e"}, {})]) == {
        "queue": "<id>",
        "table": "<id>",
    }


def test_true_constants_stay_even_when_the_context_holds_the_same_value() -> None:
    samples = [
        ({"encoding": "utf-8", "batch_size": 500}, {"default_encoding": "utf-8"}),
        ({"encoding": "utf-8", "batch_size": 500}, {"default_encoding": "latin-1"}),
    ]
    assert generalize_params(samples) == {"batch_size": 500, "encoding": "utf-8"}
    assert generalize_params([({"encoding": "utf-8"}, {"default_encoding": "utf-8"})]) == {"encoding": "utf-8"}


def test_css_selectors_are_not_paths() -> None:
    for selector in ("table.prices", "[type=submit]", "button[name=go]", "form > button", "ul li.item", ".btn"):
        assert string_kind("selector", selector) == "css", selector
    for path in ("products.csv", "main.py", "table.csv", "scrapes/rows_1.json"):
        assert string_kind("path", path) == "path", path
    assert string_kind("text", "Create account") == "plain"
    samples = [({"selector": "table.prices"}, {}), ({"selector": "table.prices"}, {})]
    assert generalize_params(samples) == {"selector": "table.prices"}
    assert generalize_params([({"s": "table.prices"}, {}), ({"s": "div.grid"}, {})]) == {"s": "<css_selector>"}


def test_merging_params_generalizes_differences_and_never_yields_an_empty_string() -> None:
    old = {"selector": "", "table": "staging_88ac38", "file": "<csv_path>", "n": 500, "opts": {"sep": ","}}
    new = {"selector": "[type=submit]", "table": "<table>", "file": "<json_path>", "n": 500, "opts": {"sep": ","}}
    assert merge_params(old, new) == {
        "file": "<path>",
        "n": 500,
        "opts": {"sep": ","},
        "selector": "<str>",
        "table": "<table>",
    }
    assert merge_params({"s": ""}, {"s": ""}) == {"s": "<str>"}


def test_a_typed_value_seen_once_and_held_by_the_situation_is_named_after_it() -> None:
    one = generalize_params([({"version": "11.10.5"}, {"toves": "11.10.5"})])
    assert one == {"version": "<toves>"}
    # Seen in two runs, the same value is a constant where the situation does not hold it.
    assert generalize_params([({"version": "11.10.5"}, {})] * 2) == {"version": "11.10.5"}
    # Seen once and nowhere in the situation: kept, as before.
    assert generalize_params([({"mime": "image/png"}, {})]) == {"mime": "image/png"}


def test_a_typed_value_the_situation_holds_in_every_call_is_read_off_it_even_when_it_never_varied() -> None:
    # The items of one task (a decision taken three times) share the task's version: every call
    # used the same one, and the next task's situation holds its own.
    items = [({"temuk": "v3.10.17", "n": i}, {"tine": "v3.10.17", "item": i}) for i in range(3)]
    assert generalize_params(items)["temuk"] == "<tine>"
    mime = [({"accept": "application/vnd.zile+json"}, {"zabo": "application/vnd.zile+json"})] * 2
    assert generalize_params(mime) == {"accept": "<zabo>"}
    # Numbers coincide: one two runs used stays a constant, as before (next test).
    assert generalize_params([({"size": "1,200"}, {"limit": "1,200"})] * 2) == {"size": "1,200"}


def test_a_number_seen_once_and_held_by_the_situation_is_named_after_it() -> None:
    assert generalize_params([({"rows": 50}, {"row_count": 50})]) == {"rows": "<row_count>"}
    # The same number in two runs is a constant, even where a feature holds it in both.
    assert generalize_params([({"part_mb": 16}, {"threads": 16})] * 2) == {"part_mb": 16}
    assert generalize_params([({"rows": 50}, {})]) == {"rows": 50}
