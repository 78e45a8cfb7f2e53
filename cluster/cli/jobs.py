"""``hindsight jobs``: the scheduled jobs of a deployment file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cluster.cli.common import AsJson
from cluster.settings import load_settings
from cluster.storage.files import private_dir

if TYPE_CHECKING:
    from cluster.serve_config import Job


jobs = typer.Typer(
    help="Scheduled jobs of the jobs: section: list their runs, run one now.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

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
