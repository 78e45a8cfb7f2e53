"""Print a bench run as tables and write it as JSON (``python -m bench.procedural.show RESULTS.json``
prints a saved run)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cluster.demo.harness import ALL, BenchResults, GeneralizationReport


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def overview_table(results: BenchResults) -> Table:
    """Success and mean steps per condition × round on unseen instances, all families together."""
    table = Table(title="Unseen instances, all families")
    columns = ("condition", "round", "episodes", "success", "mean steps", "oracle", "steps/oracle", "served")
    for name in (*columns, "edge cases", "applied", "conf."):
        table.add_column(name, justify="left" if name == "condition" else "right")
    for c in results.cells:
        if c.family == ALL and c.phase == "eval":
            table.add_row(
                c.condition,
                str(c.round),
                str(c.episodes),
                _pct(c.success_rate),
                _num(c.mean_steps),
                _num(c.oracle_steps),
                _num(c.oracle_ratio),
                _num(c.templates_served),
                _num(c.supplementary_served),
                _num(c.templates_applied),
                _num(c.applied_confidence),
            )
    return table


def family_table(results: BenchResults) -> Table:
    """Success / mean steps per family (columns) for every condition × round (rows)."""
    families = list(results.config.families)
    table = Table(title="Per family: success / mean steps (unseen instances)")
    table.add_column("condition")
    table.add_column("round", justify="right")
    for family in families:
        table.add_column(family, justify="right")
    for condition in results.config.conditions:
        for round_ in range(1, results.config.rounds + 1):
            row = [condition, str(round_)]
            for family in families:
                c = results.cell(condition, round_, family)
                row.append("-" if c is None else f"{c.success_rate:.0%} / {c.mean_steps:.1f}")
            table.add_row(*row)
    return table


def family_detail_table(results: BenchResults, round_: int | None = None) -> Table:
    """Every family × condition on one round's unseen instances (default: the last round)."""
    round_ = round_ or results.config.rounds
    table = Table(title=f"Per family, round {round_} (unseen instances); served = templates or naive rules")
    for name in ("family", "condition", "success", "mean steps", "oracle", "steps/oracle", "served", "applied"):
        table.add_column(name, justify="left" if name in ("family", "condition") else "right")
    for family in results.config.families:
        for index, condition in enumerate(results.config.conditions):
            c = results.cell(condition, round_, family)
            if c is None:
                continue
            table.add_row(
                family if index == 0 else "",
                condition,
                _pct(c.success_rate),
                _num(c.mean_steps),
                _num(c.oracle_steps),
                _num(c.oracle_ratio),
                _num(c.templates_served),
                _num(c.templates_applied),
                end_section=index == len(results.config.conditions) - 1,
            )
    return table


def generalization_table(report: GeneralizationReport) -> Table:
    """Tuning group vs held-out group per condition."""
    choices = report.choices
    table = Table(
        title=f"Generalization, round {report.round}: agent choices made on the {choices.chosen_on} group only "
        f"(top_k {choices.top_k or 'default'}, min_confidence {choices.min_confidence or 'service'})",
        caption=escape(choices.how),
    )
    for name in ("group", "families", "condition", "episodes", "success", "mean steps", "oracle", "steps/oracle"):
        table.add_column(name, justify="left" if name in ("group", "families", "condition") else "right")
    table.add_column("served", justify="right")
    last_group = None
    for c in report.cells:
        first = c.group != last_group
        last_group = c.group
        table.add_row(
            c.group if first else "",
            str(len(c.families)) if first else "",
            c.condition,
            str(c.episodes),
            _pct(c.success_rate),
            _num(c.mean_steps),
            _num(c.oracle_steps),
            _num(c.oracle_ratio),
            _num(c.templates_served),
        )
    return table


def print_report(results: BenchResults, console: Console | None = None) -> None:
    """Print the tables, the target check and the learned templates."""
    console = console or Console()
    console.print(overview_table(results))
    console.print(family_table(results))
    console.print(family_detail_table(results))
    if results.generalization is not None and results.generalization.cells:
        console.print(generalization_table(results.generalization))
    t = results.targets
    console.print(
        f"[bold]Targets, round {t.round}[/bold]: hindsight success {_pct(t.hindsight_success)} "
        f"({'ok' if t.success_ok else 'missed'}, ≥95%); step reduction vs no memory {_pct(t.step_reduction)} "
        f"({'ok' if t.steps_ok else 'missed'}, ≥40%); beats replay: {'yes' if t.beats_replay else 'no'}; "
        f"beats naive: {'yes' if t.beats_naive else 'no'}"
    )
    if results.templates:
        table = Table(title="Templates served to the hindsight agent (latest version seen)")
        for name in ("task type", "role", "conf.", "template"):
            table.add_column(name)
        for tpl in results.templates:
            marker = " (edge case)" if tpl.supplementary else ""
            # Escape: selectors such as [type=submit] would otherwise be read as rich markup and vanish.
            table.add_row(
                escape(tpl.task_type or "-"), escape(tpl.role), f"{tpl.confidence:.2f}", escape(tpl.text) + marker
            )
        console.print(table)
    else:
        console.print("No templates were served to the hindsight agent.")


def write_json(results: BenchResults, path: Path) -> None:
    """Write the results as indented JSON (read back with ``BenchResults.model_validate_json``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(results.model_dump_json(indent=2) + "\n", encoding="utf-8")
