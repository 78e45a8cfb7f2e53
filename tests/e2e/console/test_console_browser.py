"""The console in headless Chromium (Debian's ``chromium``, driven by Playwright; no browser download):
each view loads against the seeded service, and one owner's page never shows the other's data.

Screenshots of the views go to a temporary folder, or to ``HINDSIGHT_SCREENSHOTS`` when set:
``make console-screenshots`` refreshes the ones in ``docs/console/``, which this test made.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.e2e.console.conftest import Console
from tests.e2e.console.data import BOB_MEMORY, BOB_TASK, RETRY_TASK

#: Exceptions each page's script raised, by page.
ERRORS: dict[int, list[str]] = {}
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# What works on this machine and in CI (root, no GPU, no network beyond the loopback).
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [pytest.mark.milvus]


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("HINDSIGHT_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), "install Debian's chromium (apt-get install -y chromium; .ci/run does)"
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield chromium
        chromium.close()


def open_as(browser: Browser, console: Console, token: str) -> Page:
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))  # an exception in the page's script
    ERRORS[id(page)] = errors
    page.goto(f"{console.url}/ui/")
    page.wait_for_selector("#login:not([hidden])")
    page.fill("#token", token)
    page.click("#login button")
    page.wait_for_selector("#who:has-text('owner')")
    page.wait_for_selector('#view[aria-busy="false"]')  # the first view, the trajectories, is drawn
    return page


def show(page: Page, hash_: str, ready: str) -> None:
    """Go to a view and wait until it is drawn: marked busy first, so the view before cannot pass for it."""
    page.evaluate(f"document.getElementById('view').setAttribute('aria-busy', 'true'); location.hash = {hash_!r}")
    page.wait_for_selector(f'#view[aria-busy="false"] {ready}')


def test_the_three_views_in_chromium(browser: Browser, console: Console, shots: Path) -> None:
    page = open_as(browser, console, "token-alice")
    assert page.inner_text("#who") == "owner alice"
    assert RETRY_TASK in page.inner_text("#view")
    assert BOB_TASK not in page.inner_text("#view")

    # Trajectories: the DAG coloured by credit, the sibling that failed beside the one that worked.
    show(page, f"#/trajectory/{console.seeded.retry_run}", "svg .node")
    scores = {
        g.get_attribute("data-score") for g in page.query_selector_all(".dag .node") if g.get_attribute("data-score")
    }
    assert any(float(s) < 0 for s in scores)
    assert any(float(s) > 0 for s in scores)
    assert page.query_selector(".dag path[stroke-dasharray]") is not None, "the contrasting siblings are linked"
    assert "sibling" in page.inner_text("#view")
    page.click(".dag .node:has-text('add_item')")
    assert "timeout after 30s" in page.inner_text("#node-details")
    page.screenshot(path=str(shots / "trajectory.png"), full_page=True)

    # The library: versions, a template's confidence history and its provenance back to trajectories.
    show(page, "#/library", "table")
    assert "v2" in page.inner_text("#view")
    show(page, f"#/template/{console.seeded.template_id}", "svg.chart")
    text = page.inner_text("#view")
    assert "Confidence history" in text
    assert "Provenance" in text
    page.screenshot(path=str(shots / "template.png"), full_page=True)
    page.click("#view table:last-of-type a[href^='#/trajectory/']")
    page.wait_for_selector('#view[aria-busy="false"] svg .node')
    show(page, "#/library", "table")
    page.screenshot(path=str(shots / "library.png"), full_page=True)
    page.click("#view form.inline button")  # compare the active version with the other one
    page.wait_for_selector('#view[aria-busy="false"] .pill.changed')
    assert "Library v1 → v2" in page.inner_text("#view")
    page.screenshot(path=str(shots / "library-diff.png"), full_page=True)

    # Memory: versions, and why a memory matched a query.
    show(page, f"#/memory/{console.seeded.memory_id}", "table")
    assert "Tokyo" in page.inner_text("#view")
    assert "Lisbon" in page.inner_text("#view")
    page.screenshot(path=str(shots / "memory-versions.png"), full_page=True)
    show(page, "#/search/" + "where does the user live".replace(" ", "%20"), ".why")
    assert "Tokyo" in page.inner_text("#view")
    assert BOB_MEMORY not in page.inner_text("#view")
    page.screenshot(path=str(shots / "memory.png"), full_page=True)
    assert ERRORS[id(page)] == []
    page.close()


def test_another_owner_sees_nothing_of_alice(browser: Browser, console: Console) -> None:
    page = open_as(browser, console, "token-bob")
    assert page.inner_text("#who") == "owner bob"
    view = page.inner_text("#view")
    assert BOB_TASK in view
    assert RETRY_TASK not in view
    # Alice's ids in Bob's tab find nothing: the page asks with Bob's token.
    show(page, f"#/trajectory/{console.seeded.retry_run}", "#failure")
    assert "not found" in page.inner_text("#failure")
    show(page, f"#/template/{console.seeded.template_id}", "#failure")
    show(page, f"#/memory/{console.seeded.memory_id}", "#failure")
    show(page, "#/search/tokyo", "p.muted")
    assert "Tokyo" not in page.inner_text("#view")
    page.close()


def test_a_wrong_token_is_refused(browser: Browser, console: Console) -> None:
    page = open_as_failing(browser, console)
    assert "unknown bearer token" in page.inner_text("#login-error")
    assert page.inner_text("#view") == ""
    page.close()


def open_as_failing(browser: Browser, console: Console) -> Page:
    page = browser.new_page()
    page.goto(f"{console.url}/ui/")
    page.wait_for_selector("#login:not([hidden])")
    page.fill("#token", "not-a-token")
    page.click("#login button")
    page.wait_for_selector("#login-error:has-text('unknown')")
    return page
