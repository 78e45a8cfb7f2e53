"""What the ``hindsight`` subcommands share: the services of this process, the --json flag."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from cluster.services import Services
    from cluster.settings import Settings

AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of lines.")]


@contextlib.contextmanager
def services_of(settings: Settings) -> Iterator[Services]:
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
