"""``python -m cluster.cli``: the ``hindsight`` command."""

from cluster.cli import cli

cli()
