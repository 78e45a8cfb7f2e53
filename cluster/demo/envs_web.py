"""Browser-side families: submitting a form whose submit id changes per page, finding a table.

Hidden rules are listed in :mod:`cluster.demo.envs`.
"""

from __future__ import annotations

from types import MappingProxyType

from pydantic import JsonValue

from cluster.demo.env_base import (
    Call,
    Episode,
    StepResult,
    StepView,
    fail,
    make_view,
    mismatch,
    ok,
    partial,
    token,
    tool_call,
)


class FormSubmit(Episode):
    """Open a form page and submit it."""

    family = "form_submit"
    task_type = "form"
    first_stage = "open"
    decoys = MappingProxyType(
        {
            "submit": (
                ("request_submit_api", "no public API for this form"),
                ("press_ctrl_enter", "Ctrl+Enter is not bound on this page"),
            )
        }
    )
    SUBMIT_TEXTS = ("Send", "Save", "Continue", "Create account", "Confirm")
    OTHER_TEXTS = ("Cancel", "Reset", "Help", "Back", "Preview", "Print", "Share", "Save draft")
    default_budget = 10

    def __init__(self, seed: int, budget: int | None = None) -> None:
        super().__init__(seed, budget)
        self.page_kind = self.rng.choice(["signup", "checkout", "contact", "settings"])
        self.url = f"https://app.example/{self.page_kind}/{token(self.rng)}"
        self.fields = 1 if self.rng.random() < 0.25 else self.rng.randint(2, 6)
        self.page_tech = "static" if self.rng.random() < 0.3 else "spa"
        others = self.rng.sample(self.OTHER_TEXTS, self.rng.randint(2, 6))
        buttons: list[dict[str, JsonValue]] = [
            {"id": f"btn-{token(self.rng)}", "type": "button", "text": text} for text in others
        ]
        buttons.append({"id": f"btn-{token(self.rng)}", "type": "submit", "text": self.rng.choice(self.SUBMIT_TEXTS)})
        self.rng.shuffle(buttons)
        self.buttons = buttons

    @property
    def task(self) -> str:
        return f"Fill in and submit the {self.page_kind} form at {self.url}"

    def _view(self, stage: str) -> StepView:
        if stage == "open":
            return make_view(
                stage, {"goal": "open the form page", "url": self.url}, tool_call("open_page", url=self.url)
            )
        context: dict[str, JsonValue] = {
            "goal": "submit the form",
            "fields": self.fields,
            "page_tech": self.page_tech,
            "elements": list(self.buttons),
        }
        clicks = [tool_call("click", selector=f"#{b['id']}") for b in self.buttons]
        return make_view(stage, context, *clicks, tool_call("press_enter"), tool_call("submit_form_js"))

    def resolve(self, selector: str) -> dict[str, JsonValue] | None:
        """The button a selector picks: ``#id``, ``[attr=value]`` or ``button[attr=value]``."""
        if selector.startswith("#"):
            return next((b for b in self.buttons if b["id"] == selector[1:]), None)
        body = selector.removeprefix("button")
        if body.startswith("[") and body.endswith("]") and "=" in body:
            name, _, value = body[1:-1].partition("=")
            value = value.strip("\"'")
            return next((b for b in self.buttons if b.get(name.strip()) == value), None)
        return None

    def _judge(self, stage: str, call: Call) -> StepResult:
        if stage == "open":
            return mismatch(call, "url", self.url, "page") or ok(f"page loaded: {self.fields} fields")
        if call.action == "click":
            selector = call.params.get("selector")
            element = self.resolve(selector) if isinstance(selector, str) else None
            if element is None:
                return fail(f"no element matches {selector!r}")
            if element["type"] != "submit":
                return partial(f"clicked {element['text']!r}: the form was not submitted")
            return ok("form submitted")
        if call.action == "press_enter":
            return ok("form submitted") if self.fields == 1 else fail("Enter moved focus to the next field")
        if self.page_tech == "static":
            return ok("form submitted")
        return fail("the page validates in its click handler; programmatic submit was rejected")

    def _next(self, stage: str, call: Call) -> str | None:
        return "submit" if stage == "open" else None

    def oracle_steps(self) -> float:
        return 2.0


class TableLookup(Episode):
    """Find the price table on a web page and extract it."""

    family = "table_lookup"
    task_type = "scrape"
    first_stage = "open"
    decoys = MappingProxyType(
        {
            "locate": (
                ("find_by_screenshot", "OCR found no table grid"),
                ("find_by_role", "no element has role=table: the page lays out divs"),
            ),
            "extract": (
                ("extract_via_ocr", "OCR garbled the numbers"),
                ("copy_to_clipboard", "clipboard access is blocked in the headless browser"),
            ),
        }
    )
    default_budget = 10

    def __init__(self, seed: int, budget: int | None = None) -> None:
        super().__init__(seed, budget)
        self.page_kind = self.rng.choice(["legacy", "modern"])
        self.tables = self.rng.randint(1, 4)
        self.paginated = self.rng.random() < 0.4
        self.url = f"https://shop.example/prices/{token(self.rng)}"

    @property
    def task(self) -> str:
        return f"Extract the price table from {self.url}"

    def _view(self, stage: str) -> StepView:
        if stage == "open":
            return make_view(stage, {"goal": "open the page", "url": self.url}, tool_call("open_page", url=self.url))
        if stage == "extract":
            rows: dict[str, JsonValue] = {"goal": "extract the rows", "paginated": self.paginated}
            return make_view(stage, rows, tool_call("extract_rows"), tool_call("extract_all_pages", max_pages=50))
        context: dict[str, JsonValue] = {
            "goal": "locate the price table",
            "page_kind": self.page_kind,
            "tables": self.tables,
        }
        return make_view(
            stage,
            context,
            tool_call("find_by_xpath", xpath="//table[contains(., 'Price')]"),
            tool_call("find_by_css", selector="table.prices"),
            tool_call("find_by_text", text="Price"),
        )

    def _judge(self, stage: str, call: Call) -> StepResult:
        if stage == "open":
            return mismatch(call, "url", self.url, "page") or ok(f"page loaded: {self.tables} tables")
        if stage == "extract":
            if call.action == "extract_rows" and self.paginated:
                return fail("only page 1 was extracted; the table is paginated")
            if call.action == "extract_all_pages" and not self.paginated:
                return fail("no pagination control found")
            return ok("rows extracted")
        if call.action == "find_by_css" and self.page_kind == "legacy":
            return fail("legacy layout tables have no class names; the selector matched nothing")
        if call.action == "find_by_xpath" and self.page_kind == "modern":
            return fail("the table is inside a shadow root; XPath cannot reach it")
        if call.action == "find_by_text" and self.tables > 1:
            return fail(f"'Price' matches {self.tables} tables")
        return ok("table found")

    def _next(self, stage: str, call: Call) -> str | None:
        return {"open": "locate", "locate": "extract"}.get(stage)

    def oracle_steps(self) -> float:
        # Some locator always fits: xpath on legacy pages, css on modern ones.
        return 3.0
