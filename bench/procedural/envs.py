"""Six families of seeded tool-use tasks whose hidden rules depend on what the agent can observe.

Every family starts with an execution step (one action) so a failed first decision has a parent
to branch from, then offers decisions among two or three actions. Decision contexts hold only
the features the rules read plus a few harmless ones, as flat numbers, booleans and short
strings; per-instance ids and paths sit inside lists, where a condition learner sees only their
count and a parameter generalizer can still find them.

=================  =========================================================================
family             hidden rules (at the decision stage)
=================  =========================================================================
form_submit        the submit button's id is random per page; ``click`` works on
                   ``#<its id>`` or ``[type=submit]``, a made-up id fails, another button
                   is ``partial``; ``press_enter`` works only when ``fields == 1``;
                   ``submit_form_js`` only when ``page_tech == "static"``
product_import     ``add_item`` times out when ``row_count > 50``; ``bulk_import`` fails
                   unless ``schema_uniform``; ``paste_into_grid`` only for ``row_count <= 10``;
                   ``upload_via_api`` always fails (no partner key)
csv_export         ``export_csv`` fails when ``has_non_ascii`` and ``default_encoding`` is not
                   UTF-8; ``set_encoding(encoding="utf-8")`` first fixes it (other targets
                   fail); ``export_xlsx`` always fails (the importer reads CSV)
db_insert          ``batch_insert`` fails when ``has_quotes`` (run ``escape_quotes`` first);
                   ``insert_row_by_row`` times out when ``row_count > 100``
table_lookup       ``find_by_css`` fails on ``page_kind == "legacy"``; ``find_by_xpath``
                   fails on ``"modern"`` (shadow DOM); ``find_by_text`` needs ``tables == 1``;
                   then ``extract_rows`` fails when ``paginated``, ``extract_all_pages`` when not
data_sync          roles: the planner's ``plan_bulk`` fails when ``live_writes``,
                   ``plan_incremental`` when ``row_count > 5000``; the executor's
                   ``run_in_place`` fails when ``peak_hours``, ``run_on_replica`` when
                   ``replica_lag_s > 60``; the verifier's ``verify_count`` fails when
                   ``target_dedups``, ``verify_sample`` when ``row_count < 200``
=================  =========================================================================

Instance-specific values (urls, file paths, table and job names) must be passed back exactly, so
replaying another instance's concrete call fails where a generalized one works.
"""

from __future__ import annotations

import math
import random
from types import MappingProxyType

from pydantic import JsonValue

from bench.procedural.env_base import Call, Episode, StepResult, StepView, fail, ok, partial, token

ADD_ITEM_LIMIT = 50
GRID_LIMIT = 10
ROW_BY_ROW_LIMIT = 100
INCREMENTAL_LIMIT = 5000
SAMPLE_SIZE = 200
REPLICA_LAG_LIMIT = 60
SYNC_ROLES = MappingProxyType({"request": "planner", "plan": "planner", "claim": "executor", "execute": "executor"})


def log_uniform(rng: random.Random, low: int, high: int) -> int:
    """An integer spread evenly over orders of magnitude between ``low`` and ``high``."""
    return round(math.exp(rng.uniform(math.log(low), math.log(high))))


def _view(stage: str, context: dict[str, JsonValue], *options: Call, role: str = "agent") -> StepView:
    actions = tuple(dict.fromkeys(o.action for o in options))
    return StepView(stage=stage, role=role, context=context, available_actions=actions, options=options)


def _call(action: str, **params: JsonValue) -> Call:
    return Call(action=action, params=params)


def _exact(call: Call, key: str, expected: str, what: str) -> StepResult | None:
    """A failure when a parameter names another instance's resource, else None."""
    got = call.params.get(key)
    return None if got == expected else fail(f"{what} {got!r} not found")


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
            return _view(stage, {"goal": "open the form page", "url": self.url}, _call("open_page", url=self.url))
        context: dict[str, JsonValue] = {
            "goal": "submit the form",
            "fields": self.fields,
            "page_tech": self.page_tech,
            "elements": list(self.buttons),
        }
        clicks = [_call("click", selector=f"#{b['id']}") for b in self.buttons]
        return _view(stage, context, *clicks, _call("press_enter"), _call("submit_form_js"))

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
            return _exact(call, "url", self.url, "page") or ok(f"page loaded: {self.fields} fields")
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


class ProductImport(Episode):
    """Import a product file into a shop catalogue."""

    family = "product_import"
    task_type = "import"
    first_stage = "open"
    decoys = MappingProxyType(
        {
            "import": (
                ("import_via_sftp", "no SFTP credentials for the catalogue"),
                ("import_from_url", "the catalogue cannot fetch a local file by URL"),
            )
        }
    )
    default_budget = 8

    def __init__(self, seed: int, budget: int | None = None) -> None:
        super().__init__(seed, budget)
        self.row_count = log_uniform(self.rng, 3, 400)
        self.schema_uniform = self.row_count > ADD_ITEM_LIMIT or self.rng.random() < 0.6
        self.file = f"imports/products_{token(self.rng)}.csv"

    @property
    def task(self) -> str:
        return f"Import the {self.row_count} products in {self.file} into the shop catalogue"

    def _view(self, stage: str) -> StepView:
        if stage == "open":
            return _view(
                stage, {"goal": "inspect the product file", "files": [self.file]}, _call("open_file", file=self.file)
            )
        context: dict[str, JsonValue] = {
            "goal": "import the products",
            "row_count": self.row_count,
            "schema_uniform": self.schema_uniform,
            "files": [self.file],
        }
        return _view(
            stage,
            context,
            _call("bulk_import", file=self.file),
            _call("add_item", file=self.file, rows=self.row_count),
            _call("paste_into_grid", file=self.file),
            _call("upload_via_api", file=self.file),
        )

    def _judge(self, stage: str, call: Call) -> StepResult:
        missing = _exact(call, "file", self.file, "file")
        if missing is not None:
            return missing
        if stage == "open":
            return ok(f"{self.row_count} rows")
        if call.action == "upload_via_api":
            return fail("the catalogue API needs a partner key")
        if call.action == "bulk_import":
            return ok("imported") if self.schema_uniform else fail("bulk import rejected: rows differ in columns")
        if call.action == "add_item":
            if self.row_count > ADD_ITEM_LIMIT:
                return fail(f"timed out after {ADD_ITEM_LIMIT} of {self.row_count} rows")
            rows = call.params.get("rows")
            return ok("imported") if rows == self.row_count else partial(f"added {rows} of {self.row_count} rows")
        if self.row_count > GRID_LIMIT:
            return fail(f"the grid accepts at most {GRID_LIMIT} rows")
        return ok("imported")

    def _next(self, stage: str, call: Call) -> str | None:
        return "import" if stage == "open" else None


class CsvExport(Episode):
    """Export a customer list as CSV for a warehouse importer that reads UTF-8 only."""

    family = "csv_export"
    task_type = "export"
    first_stage = "query"
    decoys = MappingProxyType(
        {
            "export": (
                ("export_json", "the warehouse importer reads CSV only"),
                ("export_tsv", "the warehouse importer expects commas"),
            )
        }
    )
    default_budget = 8

    def __init__(self, seed: int, budget: int | None = None) -> None:
        super().__init__(seed, budget)
        self.segment = self.rng.choice(["eu", "asia", "americas", "vip"])
        self.row_count = log_uniform(self.rng, 10, 5000)
        self.has_non_ascii = self.rng.random() < 0.5
        self.default_encoding = self.rng.choice(["utf-8", "latin-1"])
        self.path = f"exports/customers_{token(self.rng)}.csv"

    @property
    def task(self) -> str:
        return f"Export the {self.segment} customer list to {self.path} for the warehouse"

    def _view(self, stage: str) -> StepView:
        if stage == "query":
            return _view(stage, {"goal": "load the customer list"}, _call("query_customers", segment=self.segment))
        if stage == "write":
            return _view(stage, {"goal": "write the CSV", "files": [self.path]}, _call("export_csv", path=self.path))
        context: dict[str, JsonValue] = {
            "goal": "export the customer list",
            "row_count": self.row_count,
            "has_non_ascii": self.has_non_ascii,
            "default_encoding": self.default_encoding,
            "files": [self.path],
        }
        return _view(
            stage,
            context,
            _call("export_csv", path=self.path),
            _call("set_encoding", encoding="utf-8"),
            _call("set_encoding", encoding="utf-16"),
            _call("export_xlsx", path=self.path.removesuffix(".csv") + ".xlsx"),
        )

    def _judge(self, stage: str, call: Call) -> StepResult:
        if stage == "query":
            return _exact(call, "segment", self.segment, "segment") or ok(f"{self.row_count} customers")
        if call.action == "set_encoding":
            if call.params.get("encoding") != "utf-8":
                return fail("the warehouse importer reads UTF-8 only")
            return ok("encoding set to UTF-8")
        if call.action == "export_xlsx":
            return fail("the warehouse importer reads CSV only")
        missing = _exact(call, "path", self.path, "export folder for")
        if missing is not None:
            return missing
        if stage == "export" and self.has_non_ascii and self.default_encoding != "utf-8":
            return fail("warehouse import failed: invalid UTF-8 byte 0xE9")
        return ok("exported")

    def _next(self, stage: str, call: Call) -> str | None:
        if stage == "query":
            return "export"
        return "write" if call.action == "set_encoding" else None


class DbInsert(Episode):
    """Insert scraped rows into a database table."""

    family = "db_insert"
    task_type = "db_insert"
    first_stage = "read"
    decoys = MappingProxyType(
        {
            "insert": (
                ("load_via_copy", "COPY FROM needs superuser rights"),
                ("insert_via_orm", "ORM session flush failed: detached instances"),
            )
        }
    )
    default_budget = 8

    def __init__(self, seed: int, budget: int | None = None) -> None:
        super().__init__(seed, budget)
        self.row_count = log_uniform(self.rng, 5, 2000)
        self.has_quotes = self.rng.random() < 0.25
        self.table = f"staging_{token(self.rng)}"
        self.source = f"scrapes/rows_{token(self.rng)}.json"

    @property
    def task(self) -> str:
        return f"Insert the {self.row_count} rows scraped into {self.source} into table {self.table}"

    def _view(self, stage: str) -> StepView:
        if stage == "read":
            return _view(
                stage, {"goal": "read the scraped rows", "files": [self.source]}, _call("read_rows", path=self.source)
            )
        insert = _call("batch_insert", table=self.table, batch_size=500)
        if stage == "insert_escaped":
            return _view(stage, {"goal": "insert the escaped rows", "tables": [self.table]}, insert)
        context: dict[str, JsonValue] = {
            "goal": "insert the rows into the database",
            "row_count": self.row_count,
            "has_quotes": self.has_quotes,
            "tables": [self.table],
        }
        return _view(stage, context, insert, _call("escape_quotes"), _call("insert_row_by_row", table=self.table))

    def _judge(self, stage: str, call: Call) -> StepResult:
        if stage == "read":
            return _exact(call, "path", self.source, "file") or ok(f"{self.row_count} rows read")
        if call.action == "escape_quotes":
            return ok("quotes escaped")
        missing = _exact(call, "table", self.table, "table")
        if missing is not None:
            return missing
        if call.action == "insert_row_by_row" and self.row_count > ROW_BY_ROW_LIMIT:
            return fail(f"timed out after {ROW_BY_ROW_LIMIT} of {self.row_count} rows")
        if call.action == "batch_insert" and stage == "insert" and self.has_quotes:
            return fail('SQL syntax error near "\'": unescaped quote')
        return ok(f"{self.row_count} rows inserted")

    def _next(self, stage: str, call: Call) -> str | None:
        if stage == "read":
            return "insert"
        return "insert_escaped" if call.action == "escape_quotes" else None


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
            return _view(stage, {"goal": "open the page", "url": self.url}, _call("open_page", url=self.url))
        if stage == "extract":
            rows: dict[str, JsonValue] = {"goal": "extract the rows", "paginated": self.paginated}
            return _view(stage, rows, _call("extract_rows"), _call("extract_all_pages", max_pages=50))
        context: dict[str, JsonValue] = {
            "goal": "locate the price table",
            "page_kind": self.page_kind,
            "tables": self.tables,
        }
        return _view(
            stage,
            context,
            _call("find_by_xpath", xpath="//table[contains(., 'Price')]"),
            _call("find_by_css", selector="table.prices"),
            _call("find_by_text", text="Price"),
        )

    def _judge(self, stage: str, call: Call) -> StepResult:
        if stage == "open":
            return _exact(call, "url", self.url, "page") or ok(f"page loaded: {self.tables} tables")
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


class DataSync(Episode):
    """Sync a source table to a warehouse: a planner plans, an executor runs, a verifier checks."""

    family = "data_sync"
    task_type = "sync"
    first_stage = "request"
    decoys = MappingProxyType(
        {
            "plan": (
                ("plan_manual_export", "manual exports of CRM data are not allowed"),
                ("plan_streaming", "no change-data-capture stream is configured for the CRM"),
            ),
            "execute": (
                ("run_tomorrow", "the sync must finish today"),
                ("run_via_cron", "cron jobs start at 02:00; the sync must finish today"),
            ),
            "verify": (
                ("verify_checksum", "checksums differ: the warehouse stores decimals differently"),
                ("verify_by_eye", "a manual spot check is not an accepted verification"),
            ),
        }
    )
    default_budget = 16

    def __init__(self, seed: int, budget: int | None = None) -> None:
        super().__init__(seed, budget)
        self.row_count = log_uniform(self.rng, 50, 50_000)
        self.live_writes = self.row_count <= INCREMENTAL_LIMIT and self.rng.random() < 0.4
        self.target_dedups = self.row_count >= SAMPLE_SIZE and self.rng.random() < 0.4
        self.peak_hours = self.rng.random() < 0.4
        self.replica_lag_s = self.rng.randint(0, 50) if self.peak_hours else self.rng.choice([5, 20, 90, 300])
        self.job = f"sync-{token(self.rng, 8)}"
        self.plan = "bulk"

    @property
    def task(self) -> str:
        return f"Sync {self.row_count} CRM rows to the warehouse (job {self.job})"

    def _view(self, stage: str) -> StepView:
        role = SYNC_ROLES.get(stage, "verifier")
        job = _call(
            {"request": "read_request", "claim": "claim_job", "report": "load_report"}.get(stage, "-"), job=self.job
        )
        if stage in ("request", "claim", "report"):
            return _view(stage, {"goal": job.action.replace("_", " "), "jobs": [self.job]}, job, role=role)
        context: dict[str, JsonValue]
        if stage == "plan":
            context = {"goal": "choose how to sync", "row_count": self.row_count, "live_writes": self.live_writes}
            return _view(stage, context, _call("plan_bulk"), _call("plan_incremental", batch_rows=500), role=role)
        if stage == "execute":
            context = {
                "goal": "run the plan",
                "plan": self.plan,
                "peak_hours": self.peak_hours,
                "replica_lag_s": self.replica_lag_s,
                "jobs": [self.job],
            }
            runs = (_call("run_in_place", job=self.job), _call("run_on_replica", job=self.job))
            return _view(stage, context, *runs, role=role)
        context = {"goal": "verify the synced data", "row_count": self.row_count, "target_dedups": self.target_dedups}
        return _view(stage, context, _call("verify_count"), _call("verify_sample", size=SAMPLE_SIZE), role=role)

    def _judge(self, stage: str, call: Call) -> StepResult:
        if "job" in self._view(stage).options[0].params:
            missing = _exact(call, "job", self.job, "job")
            if missing is not None:
                return missing
        if call.action == "plan_bulk" and self.live_writes:
            return fail("the source is being written to; a bulk snapshot would be inconsistent")
        if call.action == "plan_incremental" and self.row_count > INCREMENTAL_LIMIT:
            return fail("estimated run time exceeds the 60 min window")
        if call.action == "run_in_place" and self.peak_hours:
            return fail("rejected by the DBA guard: no heavy reads on the primary during peak hours")
        if call.action == "run_on_replica" and self.replica_lag_s > REPLICA_LAG_LIMIT:
            return fail(f"the replica is {self.replica_lag_s} s behind; the sync would be stale")
        if call.action == "verify_count" and self.target_dedups:
            return fail("count mismatch: the target deduplicates rows")
        if call.action == "verify_sample" and self.row_count < SAMPLE_SIZE:
            return fail(f"a sample needs at least {SAMPLE_SIZE} rows")
        return ok(f"{stage} done")

    def _next(self, stage: str, call: Call) -> str | None:
        if stage == "plan":
            self.plan = call.action.removeprefix("plan_")
        order = ["request", "plan", "claim", "execute", "report", "verify"]
        index = order.index(stage) + 1
        return order[index] if index < len(order) else None


FAMILIES: dict[str, type[Episode]] = {
    cls.family: cls for cls in (FormSubmit, ProductImport, CsvExport, DbInsert, TableLookup, DataSync)
}


def make_episode(family: str, seed: int, budget: int | None = None) -> Episode:
    """A fresh instance of ``family`` for ``seed``.

    Raises:
        KeyError: Unknown family.
    """
    return FAMILIES[family](seed, budget)
