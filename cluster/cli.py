"""The ``hindsight`` command line."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cluster.serve_config import Vectors
from cluster.settings import load_settings
from cluster.storage.files import private_dir

if TYPE_CHECKING:
    from cluster.experience.versions import LibraryVersions
    from cluster.serve_config import Job
    from cluster.services import Services
    from cluster.settings import Settings

# Plain help (click's): the rich one shows "<bool>" beside every flag.
app = typer.Typer(
    help="hindsight: agent memory that learns from hindsight.", no_args_is_help=True, rich_markup_mode=None
)

_verbose = False
"""-v was given: a failure shows its traceback, not one line."""


@app.callback()
def main(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log at DEBUG level; tracebacks on failure.")
    ] = False,
) -> None:
    global _verbose
    _verbose = verbose
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # Migration chatter and every HTTP request of a health check are noise at the console; errors still show.
    for noisy in ("alembic", *(() if verbose else ("httpx",))):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def cli() -> None:
    """The ``hindsight`` command: a failure is one line naming what to fix and exit code 1 (-v: the traceback)."""
    try:
        app()
    except Exception as exc:
        if _verbose:
            raise
        typer.echo(f"error: {failure_line(exc)}", err=True)
        raise SystemExit(1) from None


def failure_line(exc: BaseException) -> str:
    """What went wrong in one line, naming the setting or file to fix."""
    from pydantic import ValidationError
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from cluster.core.errors import HindsightError

    if isinstance(exc, FileNotFoundError):
        return f"no such file: {exc.filename} (check the path given to --config or the command)"
    if isinstance(exc, ArgumentError):
        return f"the database URL cannot be read ({exc}); fix HINDSIGHT_DATABASE_URL (database_url)"
    if isinstance(exc, DBAPIError):
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
        return f"cannot use the database: {reason}; check HINDSIGHT_DATABASE_URL (database_url)"
    if isinstance(exc, ValidationError):
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or exc.title
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return f"{exc.title}: {where}: {first['msg']}{more}"
    if isinstance(exc, HindsightError):
        return str(exc)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''} (run with -v for the traceback)"


def _until_signalled() -> None:
    """Block until SIGINT or SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


def _check_scorer(name: str, modules: list[str]) -> None:
    """The scorer, checked before anything starts: an unknown one (or a module that cannot be
    imported) is one line and exit code 1."""
    from cluster.analysis import load_scorer
    from cluster.core.errors import InvalidInput

    try:
        load_scorer(name, modules)
    except InvalidInput as exc:
        typer.echo(f"error: {exc} (the scorer and scorer_modules settings, HINDSIGHT_SCORER*)", err=True)
        raise typer.Exit(1) from exc


@app.command()
def migrate() -> None:
    """Create or upgrade the SQL schema (SQLite file or Postgres) to the current version."""
    from cluster.storage.migrate import upgrade

    settings = load_settings()
    private_dir(settings.data_dir)
    upgrade(settings.sql_url())
    logging.getLogger(__name__).info("schema is current at %s", settings.sql_url())


@app.command()
def demo(
    # Five of each: eleven families x four conditions x three rounds is 1,320 episodes, about the
    # earlier six x three at ten (1,080), so the demo keeps to about two minutes on two cores.
    train: Annotated[int, typer.Option(min=0, help="Training episodes per family and round.")] = 5,
    eval_episodes: Annotated[
        int, typer.Option("--eval", min=1, help="Unseen evaluation episodes per family and round.")
    ] = 5,
    rounds: Annotated[int, typer.Option(min=1, max=20)] = 3,
    seed: Annotated[int, typer.Option(min=0, max=999)] = 0,
    out: Annotated[Path | None, typer.Option(help="Results JSON (default <data_dir>/demo/results.json).")] = None,
) -> None:
    """The main job: agents learn from hindsight over three rounds on the embedded service."""
    from cluster.demo.harness import BenchConfig
    from cluster.demo.run import run_demo

    config = BenchConfig(train_episodes=train, eval_episodes=eval_episodes, rounds=rounds, seed=seed)
    run_demo(load_settings(), config, out)


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Deployment file: deploy/serve.yaml.")] = None,
    port: Annotated[int | None, typer.Option(help="Override the HTTP port of the config file.")] = None,
) -> None:
    """Serve the MCP endpoint (/mcp/), /health and /metrics on Ray Serve, with the attribution pool."""
    from cluster.runner import start_service
    from cluster.serve_config import load_serve_config

    serve_config = load_serve_config(config)
    if port is not None:
        serve_config = serve_config.model_copy(update={"http": serve_config.http.model_copy(update={"port": port})})
    settings = load_settings()
    _check_scorer(settings.scorer, settings.scorer_modules)
    # start_service cleans up after itself if it fails or is signalled; from here on, so do we,
    # including a SIGTERM that arrives before the handlers below are installed (Ray's exits).
    running = start_service(settings, serve_config)
    try:
        _until_signalled()
        logging.getLogger(__name__).info("shutting down")
    finally:
        running.stop()


@app.command()
def workers(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Deployment file: deploy/workers.yaml.")] = None,
    metrics_port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Serve the pool's Prometheus metrics at /metrics here.")
    ] = None,
    metrics_host: Annotated[str, typer.Option(help="Interface of --metrics-port (0.0.0.0: every interface).")] = (
        "127.0.0.1"
    ),
) -> None:
    """Run the attribution pool and the job scheduler beside an MCP endpoint that runs elsewhere.

    Starts a local Ray instance (workers coordinate through the SQL queue only, so a pool needs no
    shared Ray cluster), or joins HINDSIGHT_RAY_ADDRESS.
    """
    from actors.pool import start_background, stop_pool
    from cluster.metrics import metrics_dir, reset_metrics_dir
    from cluster.runner import ensure_ray, serve_pool_metrics
    from cluster.serve_config import load_serve_config
    from pipelines.jobs import run_job

    settings = load_settings()
    serve_config = load_serve_config(config)
    _check_scorer(settings.scorer, settings.scorer_modules)
    if metrics_port is not None and settings.ray_address is not None:
        raise typer.BadParameter("--metrics-port needs a local Ray instance: the workers must run on this host")
    private_dir(settings.data_dir)
    ensure_ray(settings)
    env: dict[str, str] | None = None
    server = None
    if settings.ray_address is None:
        # A local instance: the workers run on this host and share metric files with it.
        directory = metrics_dir(settings.data_dir)
        env = reset_metrics_dir(directory)
        if metrics_port is not None:
            server = serve_pool_metrics(directory, metrics_host, metrics_port)
    pool = start_background(settings, serve_config, env, run_job=run_job)
    try:
        logging.getLogger(__name__).info("%d attribution workers running", serve_config.attribution.workers)
        _until_signalled()
    finally:
        stop_pool(pool)
        if server is not None:
            server.shutdown()


@app.command()
def stdio() -> None:
    """Serve the same MCP tools over stdio for one local agent (owner: the local_owner setting)."""
    from cluster.local import run_stdio

    settings = load_settings()
    _check_scorer(settings.scorer, settings.scorer_modules)
    run_stdio(settings)


@app.command()
def proxy(
    config: Annotated[Path, typer.Option("--config", "-c", help="JSON with mcpServers (docs/proxy.md).")],
    http: Annotated[
        str | None, typer.Option(help="Serve Streamable HTTP on HOST:PORT (path /mcp) instead of stdio.")
    ] = None,
) -> None:
    """Front the agent's MCP servers and record every tool call in hindsight (no recording code)."""
    from cluster.core.errors import InvalidInput
    from cluster.proxy.config import load_config
    from cluster.proxy.run import run

    try:
        proxy_config = load_config(config)
        address = None
        if http is not None:
            host, _, port = http.rpartition(":")
            if not host or not port.isdigit():
                raise InvalidInput(f"--http {http!r}: give HOST:PORT, e.g. 127.0.0.1:8765")
            address = (host, int(port))
    except InvalidInput as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    run(proxy_config, load_settings(), address)


@app.command()
def maintain() -> None:
    """One memory maintenance pass: promote what turned out to matter, archive the idle, purge the expired."""
    from cluster.memory.maintenance import run_maintenance
    from cluster.services import build_services

    services = build_services(load_settings())
    try:
        typer.echo(run_maintenance(services.memory).model_dump_json())
    finally:
        services.close()


@app.command()
def reprocess(
    output: Annotated[Path, typer.Option(help="Folder for one <owner>.jsonl library per owner.")] = Path("reprocessed"),
    scorer: Annotated[
        str | None, typer.Option(help="Registered scorer name (default: the scorer setting, the live one).")
    ] = None,
    scorer_module: Annotated[
        list[str] | None,
        typer.Option(help="Module to import first, where scorers register (default: the scorer_modules setting)."),
    ] = None,
    owner: Annotated[str | None, typer.Option(help="Only this owner's trajectories.")] = None,
    actors: Annotated[int, typer.Option(min=1, help="Ray Data actor pool size.")] = 2,
    new_version: Annotated[
        bool, typer.Option(help="Also build a new library version per owner (served once promoted).")
    ] = False,
) -> None:
    """Re-run attribution over every stored trajectory with a Ray Data job (e.g. a new scorer)."""
    from cluster.runner import ensure_ray
    from pipelines.reprocess import reprocess as run

    settings = load_settings()
    modules = settings.scorer_modules if scorer_module is None else scorer_module
    _check_scorer(scorer or settings.scorer, modules)
    ensure_ray(settings)
    summary = run(
        settings,
        output,
        scorer=scorer,
        scorer_modules=modules,
        owner=owner,
        actors=actors,
        new_version=new_version,
    )
    typer.echo(f"{summary.trajectories} trajectories in {summary.groups} groups → {summary.templates_by_owner}")
    for path in summary.outputs:
        typer.echo(f"wrote {path}")
    for name, version in summary.versions.items():
        typer.echo(f"built library version {version} of {name} (hindsight library promote {version} --owner {name})")


@app.command()
def evaluate(
    scorer: Annotated[
        list[str] | None,
        typer.Option(help="Registered scorer name; repeat to compare several (default: the scorer setting)."),
    ] = None,
    scorer_module: Annotated[
        list[str] | None,
        typer.Option(help="Module to import first, where scorers register (default: the scorer_modules setting)."),
    ] = None,
    owner: Annotated[str | None, typer.Option(help="Only this owner (default: every owner, each on its own).")] = None,
    holdout: Annotated[float, typer.Option(help="Newest share of each owner's trajectories held out.")] = 0.2,
    top_k: Annotated[int | None, typer.Option(help="Templates served per decision (default experience_top_k).")] = None,
    min_confidence: Annotated[
        float | None, typer.Option(help="Confidence threshold (default confidence_threshold).")
    ] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the reports as JSON here.")] = None,
    details: Annotated[bool, typer.Option(help="Put every decision's result in the JSON.")] = False,
    groups: Annotated[bool, typer.Option(help="A row per role and task type.")] = True,
) -> None:
    """Offline evaluation: learn a library from older trajectories, score it on the newest (hit@k, avoid
    precision, coverage, tokens served). No agents, Ray or Milvus needed."""
    from pydantic import ValidationError
    from rich.console import Console

    from cluster.core.errors import InvalidInput
    from pipelines.evaluate_job import evaluation_table, run_evaluation, write_json

    settings = load_settings()
    try:
        reports = run_evaluation(
            settings,
            scorer or [settings.scorer],
            owner=owner,
            holdout=holdout,
            top_k=top_k,
            min_confidence=min_confidence,
            scorer_modules=settings.scorer_modules if scorer_module is None else scorer_module,
            keep_decisions=details,
        )
    except (InvalidInput, ValidationError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    if not reports:
        typer.echo("no finalized trajectories to evaluate")
        raise typer.Exit(1)
    Console().print(evaluation_table(reports, groups=groups))
    if json_path is not None:
        write_json(reports, json_path)
        typer.echo(f"wrote {json_path}")


@app.command()
def reindex(
    owner: Annotated[str | None, typer.Option(help="Only this owner's vectors (default: every owner).")] = None,
    what: Annotated[
        Vectors,
        typer.Option(help="Experience templates (a Ray Data job), long-term memories (in this process), or all."),
    ] = Vectors.TEMPLATES,
    actors: Annotated[int, typer.Option(min=1, help="Embedding actors (one embedder, one thread each).")] = 2,
    batch_size: Annotated[int, typer.Option(min=1, help="Texts embedded per call.")] = 256,
) -> None:
    """Rebuild vectors in Milvus from SQL (after a Milvus loss, a restore or an embedder change);
    stale vectors are removed and queries keep answering meanwhile."""
    settings = load_settings()
    if what is not Vectors.MEMORIES:
        from cluster.runner import ensure_ray
        from pipelines.reindex import reindex as run

        ensure_ray(settings)
        summary = run(settings, owner=owner, actors=actors, batch_size=batch_size)
        rate = summary.total / summary.seconds if summary.seconds else 0.0
        typer.echo(
            f"{summary.total} template vectors written in {summary.seconds:.1f}s ({rate:.0f}/s) on {actors} actors, "
            f"{sum(summary.stale_removed.values())} stale removed: {summary.written}"
        )
    if what is not Vectors.TEMPLATES:
        started = time.perf_counter()
        with _services(settings) as services:
            written = services.memory.reindex(owner, batch_size=batch_size)
        typer.echo(f"{written} memory vectors written in {time.perf_counter() - started:.1f}s")


@contextlib.contextmanager
def _services(settings: Settings) -> Iterator[Services]:
    """The services of this process, closed afterwards; a refusal becomes a message and exit code 1."""
    from cluster.core.errors import HindsightError
    from cluster.services import build_services

    services = build_services(settings)
    try:
        yield services
    except HindsightError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    finally:
        services.close()


# --- hindsight library ------------------------------------------------------------------------

library = typer.Typer(
    help="Versions of an owner's experience library: list, diff, promote, rollback, import, export.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(library, name="library")

LibraryOwner = Annotated[str | None, typer.Option("--owner", help="Whose library (default: the local_owner setting).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of lines.")]


@contextlib.contextmanager
def _library_versions() -> Iterator[tuple[LibraryVersions, str]]:
    """The versions of the settings' SQL store (migrated first), and the default owner; errors become messages."""
    from cluster.core.errors import HindsightError
    from cluster.experience.versions import LibraryVersions
    from cluster.storage.db import Database
    from cluster.storage.migrate import upgrade

    settings = load_settings()
    private_dir(settings.data_dir)
    upgrade(settings.sql_url())
    db = Database(settings.sql_url())
    try:
        yield LibraryVersions(db), settings.local_owner
    except HindsightError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    finally:
        db.dispose()


@library.command("list")
def library_list(owner: LibraryOwner = None, as_json: AsJson = False) -> None:
    """The versions, oldest first: number, created, source, templates; * marks the active one."""
    with _library_versions() as (versions, default_owner):
        found = versions.versions(owner or default_owner)
    if as_json:
        typer.echo(json.dumps([v.model_dump(mode="json") for v in found], indent=2))
        return
    if not found:
        typer.echo("no library versions")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, caption="* active, - the one rollback returns to")
    for column in ("", "version", "created", "source", "templates", "note"):
        table.add_column(column, justify="right" if column == "templates" else "left")
    for v in found:
        mark = "*" if v.active else "-" if v.previous else ""
        created = v.created_at.strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(mark, f"v{v.version}", created, v.source.value, str(v.templates), v.note or "")
    Console().print(table)


@library.command("diff")
def library_diff(
    a: Annotated[int, typer.Argument(min=1, help="The version to compare from.")],
    b: Annotated[int, typer.Argument(min=1, help="The version to compare to.")],
    owner: LibraryOwner = None,
    as_json: AsJson = False,
) -> None:
    """Rules in B and not in A (+), in A and not in B (-), in both with another confidence (~)."""
    with _library_versions() as (versions, default_owner):
        diff = versions.diff(owner or default_owner, a, b)
    if as_json:
        typer.echo(diff.model_dump_json(indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in ("", "role", "confidence", "rule"):
        table.add_column(column, justify="right" if column == "confidence" else "left", overflow="fold")
    for sign, entries in (("+", diff.added), ("-", diff.removed), ("~", diff.changed)):
        for e in entries:
            before = "" if e.confidence_a is None else f"{e.confidence_a:.2f}"
            after = "" if e.confidence_b is None else f"{e.confidence_b:.2f}"
            confidence = f"{before}→{after}" if sign == "~" else before or after
            table.add_row(sign, e.role, confidence, e.rule)
    if table.row_count:
        Console().print(table)
    typer.echo(
        f"v{diff.a} → v{diff.b}: {len(diff.added)} added, {len(diff.removed)} removed, "
        f"{len(diff.changed)} changed, {diff.unchanged} unchanged"
    )


@library.command("promote")
def library_promote(
    version: Annotated[int, typer.Argument(min=1, help="The version to serve from now on.")],
    owner: LibraryOwner = None,
    force: Annotated[bool, typer.Option(help="Promote even if some templates have no vector yet.")] = False,
    as_json: AsJson = False,
) -> None:
    """Serve VERSION from now on (one transaction: no query sees a mix); the version served until now is kept."""
    with _library_versions() as (versions, default_owner):
        switch = versions.promote(owner or default_owner, version, force=force)
    typer.echo(
        switch.model_dump_json() if as_json else f"v{switch.active} active (rollback returns to v{switch.previous})"
    )


@library.command("rollback")
def library_rollback(owner: LibraryOwner = None, as_json: AsJson = False) -> None:
    """Serve the previously active version again."""
    with _library_versions() as (versions, default_owner):
        switch = versions.rollback(owner or default_owner)
    typer.echo(
        switch.model_dump_json() if as_json else f"v{switch.active} active (rollback returns to v{switch.previous})"
    )


@library.command("import")
def library_import(
    path: Annotated[
        Path, typer.Argument(exists=True, help="An exchange file (hindsight-experience) or an Agent Skills folder.")
    ],
    owner: LibraryOwner = None,
    note: Annotated[str, typer.Option(help="Shown by library list.")] = "",
) -> None:
    """Build a new, inactive version from an exchange file (e.g. a reprocess output) or a skills folder
    (library export --skills; a rule edited by hand becomes a manual template); promote it to serve it."""
    from cluster.experience.exchange import parse_export
    from cluster.experience.models import LibrarySource
    from cluster.experience.skills import SKILL_FILE, parse_skill

    settings = load_settings()
    with _services(settings) as services:
        if path.is_dir():
            templates = [t for skill in sorted(path.glob(f"*/{SKILL_FILE}")) for t in parse_skill(skill.read_text())[1]]
        else:
            templates = parse_export(path.read_text().splitlines())
        version = services.experience.create_version(
            owner or settings.local_owner, templates, LibrarySource.IMPORT, note or path.name
        )
    typer.echo(f"built v{version} from {path} ({len(templates)} templates read); not active until promoted")


@library.command("export")
def library_export(
    owner: LibraryOwner = None,
    out: Annotated[Path | None, typer.Option(help="Write the exchange file here (default: standard output).")] = None,
    skills: Annotated[
        Path | None, typer.Option(help="Write an Agent Skills folder here instead: one SKILL.md per task type.")
    ] = None,
    role: Annotated[str, typer.Option(help="With --skills: whose rules.")] = "agent",
) -> None:
    """The active version in the exchange format library import reads, or as Agent Skills (--skills)."""
    from cluster.experience.exchange import parse_export
    from cluster.experience.skills import SKILL_FILE, export_skills

    settings = load_settings()
    with _services(settings) as services:
        lines = list(services.experience.export_library(owner or settings.local_owner))
    if skills is None:
        text = "\n".join(lines) + "\n"
        if out is None:
            typer.echo(text, nl=False)
        else:
            out.write_text(text)
            typer.echo(f"wrote {len(lines) - 1} templates to {out}", err=True)
        return
    files = export_skills(parse_export(lines), role)
    for name, body in files.items():
        (skills / name).mkdir(parents=True, exist_ok=True)
        (skills / name / SKILL_FILE).write_text(body)
    typer.echo(f"wrote {len(files)} skills of role {role} to {skills}", err=True)


# --- hindsight jobs ---------------------------------------------------------------------------

jobs = typer.Typer(
    help="Scheduled jobs of the jobs: section: list their runs, run one now.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(jobs, name="jobs")

JobsConfig = Annotated[
    Path | None, typer.Option("--config", "-c", help="Deployment file with the jobs: section (deploy/serve.yaml).")
]


def _scheduled_jobs(path: Path | None) -> dict[str, Job]:
    """The enabled jobs of the deployment file; a bad file is one line per error and exit 1."""
    from pydantic import ValidationError

    from cluster.serve_config import load_serve_config

    try:
        return load_serve_config(path).scheduled_jobs()
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            where = ".".join(str(part) for part in error["loc"])
            typer.echo(f"error: {path}: {where}: {error['msg']}", err=True)
        raise typer.Exit(1) from exc


def _disabled_job(name: str, path: Path | None) -> Job | None:
    """Job ``name`` of the deployment file if it is declared there but disabled (kept off the schedule)."""
    from cluster.serve_config import load_serve_config

    declared = load_serve_config(path).jobs.get(name)
    return declared if declared is not None and not declared.enabled else None


def _brief(value: object, width: int = 48, *, nested: bool = True) -> str:
    """A JSON value on one short line: scalars as key=value, nested values as compact JSON (or, without
    ``nested``, as their size: the details are in ``--json``), cut to ``width``."""
    if value is None:
        return "–"
    if isinstance(value, dict):
        parts = [
            f"{k}={v}"
            if not isinstance(v, dict | list)
            else f"{k}={json.dumps(v, default=str)}"
            if nested
            else f"{k}=[{len(v)}]"
            for k, v in value.items()
        ]
        text = " ".join(parts)
    else:
        text = json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


@jobs.command("list")
def jobs_list(config: JobsConfig = None, as_json: AsJson = False) -> None:
    """Each job: kind, interval, last run, duration, result, watermark and who runs it now."""
    from rich.console import Console
    from rich.table import Table

    from cluster.jobs.runs import JobRuns
    from cluster.storage.db import Database
    from cluster.storage.migrate import upgrade

    settings = load_settings()
    configured = _scheduled_jobs(config)
    private_dir(settings.data_dir)
    upgrade(settings.sql_url())
    db = Database(settings.sql_url())
    try:
        states = {s.name: s for s in JobRuns(db, "cli").states()}
    finally:
        db.dispose()
    if as_json:
        body = [
            {
                "name": name,
                "configured": name in configured,
                "interval_s": configured[name].interval_s if name in configured else None,
                **(states[name].model_dump(mode="json", exclude={"name"}) if name in states else {}),
            }
            for name in sorted(set(configured) | set(states))
        ]
        typer.echo(json.dumps(body, indent=2))
        return
    table = Table(title="scheduled jobs", show_lines=False)
    for column in ("job", "kind", "interval", "last run", "duration", "result", "watermark", "holder"):
        table.add_column(column, justify="right" if column in ("interval", "duration") else "left")
    for name in sorted(set(configured) | set(states)):
        job, state = configured.get(name), states.get(name)
        kind = job.kind if job is not None else f"{state.kind} (not configured)" if state else "?"
        last = "never"
        if state is not None and state.started_at is not None:
            last = state.started_at.strftime("%Y-%m-%d %H:%M:%S")
            if state.unfinished:
                last += " (running)" if state.holder else " (unfinished)"
            elif state.last_error:
                last += " failed"
        result = (
            state.last_error if state and state.last_error else _brief(state.result if state else None, nested=False)
        )
        table.add_row(
            name,
            kind,
            f"{job.interval_s:g}s" if job is not None else "–",
            last,
            "–" if state is None or state.duration_s is None else f"{state.duration_s:.1f}s",
            result,
            _brief(state.watermark if state else None, 32),
            (state.holder if state else None) or "–",
        )
    Console().print(table)


@jobs.command("run")
def jobs_run(
    name: Annotated[str, typer.Argument(help="A job of the jobs: section.")],
    config: JobsConfig = None,
) -> None:
    """Run one pass of job NAME now, in this process (on local Ray for Ray Data jobs), unless another holds it."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from cluster.analysis import process_worker
    from cluster.jobs.runs import JobRuns
    from cluster.storage.db import Database
    from cluster.storage.migrate import upgrade
    from pipelines.jobs import run_job

    settings = load_settings()
    configured = _scheduled_jobs(config)
    job = configured.get(name)
    if job is None:
        job = _disabled_job(name, config)
        if job is None:
            known = ", ".join(configured) or "none"
            typer.echo(
                f"error: no job named {name!r} in {config or 'the default configuration'} (jobs: {known})", err=True
            )
            raise typer.Exit(1)
        # Disabled means "not on the schedule" (serve.yaml: "on demand: hindsight jobs run reindex").
        typer.echo(f"job {name} is disabled in {config}: not scheduled; running it once on demand", err=True)
    private_dir(settings.data_dir)
    upgrade(settings.sql_url())
    if job.uses_ray:
        from cluster.runner import ensure_ray

        ensure_ray(settings)  # a Ray Data pipeline: local Ray unless HINDSIGHT_RAY_ADDRESS names one
    db = Database(settings.sql_url())
    console = Console()
    try:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as bar:
            task = bar.add_task(f"{name} ({job.kind})")

            def progress(message: str) -> None:
                bar.update(task, description=f"{name} ({job.kind}): {message}")

            report = run_job(JobRuns(db, f"{process_worker()}/cli"), settings, name, job, force=True, progress=progress)
        holders = {s.name: s.holder for s in JobRuns(db, "cli").states()}
    finally:
        db.dispose()
    if report is None:
        typer.echo(f"error: job {name} is being run by {holders.get(name)}; not run again", err=True)
        raise typer.Exit(1)
    if report.error is not None:
        typer.echo(f"error: job {name} failed after {report.duration_s:.1f}s: {report.error}", err=True)
        raise typer.Exit(1)
    resumed = " (resumed from its watermark)" if report.resumed else ""
    typer.echo(f"{name} done in {report.duration_s:.1f}s{resumed}: {json.dumps(report.result, default=str)}")


if __name__ == "__main__":
    cli()
