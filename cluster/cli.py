"""The ``hindsight`` command line."""

from __future__ import annotations

import logging

import typer

from cluster.settings import load_settings

app = typer.Typer(help="hindsight: agent memory that learns from hindsight.", no_args_is_help=True)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at DEBUG level.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # Migration chatter is noise at the console; errors still show.
    logging.getLogger("alembic").setLevel(logging.WARNING)


@app.command()
def migrate() -> None:
    """Create or upgrade the SQL schema (SQLite file or Postgres) to the current version."""
    from cluster.stores.migrate import upgrade

    settings = load_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.sql_url())
    logging.getLogger(__name__).info("schema is current at %s", settings.sql_url())


@app.command()
def demo() -> None:
    """Run the main job on the embedded default (SQLite file under the data directory)."""
    from cluster.demo import run_capture_demo

    run_capture_demo(load_settings())


if __name__ == "__main__":
    app()
