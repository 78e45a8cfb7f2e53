"""The ``hindsight`` command line."""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path
from typing import Annotated

import typer

from cluster.cli.common import services_of
from cluster.cli.jobs import jobs
from cluster.cli.library import library
from cluster.serve_config import Vectors
from cluster.settings import load_settings
from cluster.storage.files import private_dir

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
    for noisy in ("alembic", *(() if verbose else ("httpx", "httpx2"))):
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
        with services_of(settings) as services:
            written = services.memory.reindex(owner, batch_size=batch_size)
        typer.echo(f"{written} memory vectors written in {time.perf_counter() - started:.1f}s")


app.add_typer(library, name="library")
app.add_typer(jobs, name="jobs")
