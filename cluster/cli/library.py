"""``hindsight library``: versions of an owner's experience library."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cluster.cli.common import AsJson, services_of
from cluster.settings import load_settings
from cluster.storage.files import private_dir

if TYPE_CHECKING:
    from cluster.experience.versions import LibraryVersions


library = typer.Typer(
    help="Versions of an owner's experience library: list, diff, promote, rollback, import, export.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

LibraryOwner = Annotated[str | None, typer.Option("--owner", help="Whose library (default: the local_owner setting).")]


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
    with services_of(settings) as services:
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
    with services_of(settings) as services:
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
