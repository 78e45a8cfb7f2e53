"""Data-moving families: product import, CSV export, batch insert into a database.

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
    log_uniform,
    make_view,
    mismatch,
    ok,
    partial,
    token,
    tool_call,
)

ADD_ITEM_LIMIT = 50
GRID_LIMIT = 10
ROW_BY_ROW_LIMIT = 100


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
            return make_view(
                stage,
                {"goal": "inspect the product file", "files": [self.file]},
                tool_call("open_file", file=self.file),
            )
        context: dict[str, JsonValue] = {
            "goal": "import the products",
            "row_count": self.row_count,
            "schema_uniform": self.schema_uniform,
            "files": [self.file],
        }
        return make_view(
            stage,
            context,
            tool_call("bulk_import", file=self.file),
            tool_call("add_item", file=self.file, rows=self.row_count),
            tool_call("paste_into_grid", file=self.file),
            tool_call("upload_via_api", file=self.file),
        )

    def _judge(self, stage: str, call: Call) -> StepResult:
        missing = mismatch(call, "file", self.file, "file")
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

    def oracle_steps(self) -> float:
        # Open, then one import call: some method always fits (large files are always uniform).
        return 2.0


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
            return make_view(
                stage, {"goal": "load the customer list"}, tool_call("query_customers", segment=self.segment)
            )
        if stage == "write":
            return make_view(
                stage, {"goal": "write the CSV", "files": [self.path]}, tool_call("export_csv", path=self.path)
            )
        context: dict[str, JsonValue] = {
            "goal": "export the customer list",
            "row_count": self.row_count,
            "has_non_ascii": self.has_non_ascii,
            "default_encoding": self.default_encoding,
            "files": [self.path],
        }
        return make_view(
            stage,
            context,
            tool_call("export_csv", path=self.path),
            tool_call("set_encoding", encoding="utf-8"),
            tool_call("set_encoding", encoding="utf-16"),
            tool_call("export_xlsx", path=self.path.removesuffix(".csv") + ".xlsx"),
        )

    def _judge(self, stage: str, call: Call) -> StepResult:
        if stage == "query":
            return mismatch(call, "segment", self.segment, "segment") or ok(f"{self.row_count} customers")
        if call.action == "set_encoding":
            if call.params.get("encoding") != "utf-8":
                return fail("the warehouse importer reads UTF-8 only")
            return ok("encoding set to UTF-8")
        if call.action == "export_xlsx":
            return fail("the warehouse importer reads CSV only")
        missing = mismatch(call, "path", self.path, "export folder for")
        if missing is not None:
            return missing
        if stage == "export" and self.has_non_ascii and self.default_encoding != "utf-8":
            return fail("warehouse import failed: invalid UTF-8 byte 0xE9")
        return ok("exported")

    def _next(self, stage: str, call: Call) -> str | None:
        if stage == "query":
            return "export"
        return "write" if call.action == "set_encoding" else None

    def oracle_steps(self) -> float:
        return 3.0 if self.has_non_ascii and self.default_encoding != "utf-8" else 2.0


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
            return make_view(
                stage,
                {"goal": "read the scraped rows", "files": [self.source]},
                tool_call("read_rows", path=self.source),
            )
        insert = tool_call("batch_insert", table=self.table, batch_size=500)
        if stage == "insert_escaped":
            return make_view(stage, {"goal": "insert the escaped rows", "tables": [self.table]}, insert)
        context: dict[str, JsonValue] = {
            "goal": "insert the rows into the database",
            "row_count": self.row_count,
            "has_quotes": self.has_quotes,
            "tables": [self.table],
        }
        return make_view(
            stage, context, insert, tool_call("escape_quotes"), tool_call("insert_row_by_row", table=self.table)
        )

    def _judge(self, stage: str, call: Call) -> StepResult:
        if stage == "read":
            return mismatch(call, "path", self.source, "file") or ok(f"{self.row_count} rows read")
        if call.action == "escape_quotes":
            return ok("quotes escaped")
        missing = mismatch(call, "table", self.table, "table")
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

    def oracle_steps(self) -> float:
        # Quotes need escaping first, unless the rows are few enough to go one by one.
        return 3.0 if self.has_quotes and self.row_count > ROW_BY_ROW_LIMIT else 2.0
