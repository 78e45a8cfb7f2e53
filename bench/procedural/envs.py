"""Six families of seeded tool-use tasks whose hidden rules depend on what the agent can observe.

Every family starts with an execution step (one action) so a failed first decision has a parent
to branch from, then offers decisions among several actions: the ones the rules are about, plus
one or two plausible *decoy* tools that never work here (``Episode.decoys``; a real agent has
more tools in view than a task needs). Decision contexts hold only the features the rules read
plus a few harmless ones, as flat numbers, booleans and short strings; per-instance ids and paths
sit inside lists, where a condition learner sees only their count and a parameter generalizer can
still find them. Budgets: 8 calls (form_submit and table_lookup 10, data_sync 16).

=================  =========================================================================
family             hidden rules (at the decision stage)
=================  =========================================================================
form_submit        the submit button's id is random per page; ``click`` works on
                   ``#<its id>`` or ``[type=submit]``, a made-up id fails, another button
                   is ``partial``; ``press_enter`` works only when ``fields == 1``;
                   ``submit_form_js`` only when ``page_tech == "static"``
product_import     ``add_item`` times out when ``row_count > 50``; ``bulk_import`` fails
                   unless ``schema_uniform``; ``paste_into_grid`` only for ``row_count <= 10``;
                   ``upload_via_api`` always fails (no partner key)
csv_export         ``export_csv`` fails when ``has_non_ascii`` and ``default_encoding`` is not
                   UTF-8; ``set_encoding(encoding="utf-8")`` first fixes it (other targets
                   fail); ``export_xlsx`` always fails (the importer reads CSV)
db_insert          ``batch_insert`` fails when ``has_quotes`` (run ``escape_quotes`` first);
                   ``insert_row_by_row`` times out when ``row_count > 100``
table_lookup       ``find_by_css`` fails on ``page_kind == "legacy"``; ``find_by_xpath``
                   fails on ``"modern"`` (shadow DOM); ``find_by_text`` needs ``tables == 1``;
                   then ``extract_rows`` fails when ``paginated``, ``extract_all_pages`` when not
data_sync          roles: the planner's ``plan_bulk`` fails when ``live_writes``,
                   ``plan_incremental`` when ``row_count > 5000``; the executor's
                   ``run_in_place`` fails when ``peak_hours``, ``run_on_replica`` when
                   ``replica_lag_s > 60``; the verifier's ``verify_count`` fails when
                   ``target_dedups``, ``verify_sample`` when ``row_count < 200``
=================  =========================================================================

Instance-specific values (urls, file paths, table and job names) must be passed back exactly, so
replaying another instance's concrete call fails where a generalized one works.

The families live in :mod:`~bench.procedural.envs_web` (form_submit, table_lookup),
:mod:`~bench.procedural.envs_data` (product_import, csv_export, db_insert) and
:mod:`~bench.procedural.envs_roles` (data_sync).
"""

from __future__ import annotations

from bench.procedural.env_base import Episode
from bench.procedural.envs_data import CsvExport, DbInsert, ProductImport
from bench.procedural.envs_roles import DataSync
from bench.procedural.envs_web import FormSubmit, TableLookup

FAMILIES: dict[str, type[Episode]] = {
    cls.family: cls for cls in (FormSubmit, ProductImport, CsvExport, DbInsert, TableLookup, DataSync)
}


def make_episode(family: str, seed: int, budget: int | None = None) -> Episode:
    """A fresh instance of ``family`` for ``seed``.

    Raises:
        KeyError: Unknown family.
    """
    return FAMILIES[family](seed, budget)


__all__ = [
    "FAMILIES",
    "CsvExport",
    "DataSync",
    "DbInsert",
    "FormSubmit",
    "ProductImport",
    "TableLookup",
    "make_episode",
]
