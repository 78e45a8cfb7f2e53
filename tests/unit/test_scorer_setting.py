"""The attribution scorer: one setting, one way to find it (``load_scorer``), refused at start when unknown."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from actors.engine.credit import default_scorer
from cluster.analysis import load_scorer
from cluster.cli import app
from cluster.core.errors import InvalidInput
from cluster.settings import Settings

PLUGIN = "tests.unit.scorer_plugin"


def test_a_module_of_the_setting_registers_its_scorer_on_import() -> None:
    settings = Settings(scorer="plugin_scorer", scorer_modules=[PLUGIN])
    scorer = load_scorer(settings.scorer, settings.scorer_modules)
    from tests.unit.scorer_plugin import plugin_scorer  # after load_scorer, which imported it

    assert scorer is plugin_scorer
    assert load_scorer(settings.scorer, settings.scorer_modules) is scorer  # imported once, registered once


def test_the_default_setting_is_the_built_in_scorer() -> None:
    settings = Settings()
    assert (settings.scorer, settings.scorer_modules) == ("default", [])
    assert load_scorer(settings.scorer) is default_scorer


def test_an_unknown_scorer_is_refused_with_the_registered_names() -> None:
    with pytest.raises(InvalidInput, match=r"unknown scorer 'nope'; registered: .*default"):
        load_scorer("nope")


def test_a_module_that_cannot_be_imported_is_refused_by_name() -> None:
    with pytest.raises(InvalidInput, match="scorer module 'no_such_scorers' cannot be imported"):
        load_scorer("default", ["no_such_scorers"])


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HINDSIGHT_SCORER": "nope"}, "unknown scorer 'nope'"),
        ({"HINDSIGHT_SCORER_MODULES": '["no_such_scorers"]'}, "scorer module 'no_such_scorers'"),
    ],
)
def test_stdio_refuses_an_unknown_scorer_before_it_starts(env: dict[str, str], message: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["stdio"], env={"HINDSIGHT_DATA_DIR": str(tmp_path), **env})
    assert result.exit_code == 1
    assert message in result.output
    assert not (tmp_path / "hindsight.db").exists()  # nothing was opened
