"""Eleven families of seeded tool-use tasks whose hidden rules depend on what the agent can observe.

Every family starts with an execution step (one action) so a failed first decision has a parent
to branch from, then offers decisions among several actions: the ones the rules are about, plus
one or two plausible *decoy* tools that never work here (``Episode.decoys``; a real agent has
more tools in view than a task needs). Decision contexts hold only the features the rules read
plus a few harmless ones, as flat numbers, booleans and short strings; per-instance ids and paths
sit inside lists, where a condition learner sees only their count and a parameter generalizer can
still find them. Budgets: 8 steps (form_submit and table_lookup 10, data_sync 16).

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
asset_preview      *categorical, five values onto two actions*: ``rasterize_thumbnail`` works
                   for ``mime_type`` image/png, image/jpeg, image/webp; ``render_first_page``
                   for application/pdf, application/epub+zip; the other fails
video_resize       *two working actions of different cost*: ``transcode_padded`` always works
                   but costs 3 steps (and 3× the latency); ``scale_stream`` costs 1 and works
                   only when ``aspect_ratio == "16/9"`` (half the clips)
archive_upload     *three numeric bands*: ``put_object`` for ``size_mb <= 8``,
                   ``multipart_upload`` for ``8 < size_mb <= 512``, ``resumable_upload`` above;
                   each fails outside its band
payment_settle     *depends on step 1's answer*: ``authorize_payment`` returns an
                   authorization shown at the settle step as ``auth_result``; ``approved`` →
                   ``capture_payment``, ``challenge_required`` → ``start_3ds_challenge`` (then a
                   capture step), ``partially_approved`` → ``capture_partial`` (on an approved
                   one it is ``partial``: it settles too little)
address_geocode    *noisy*: with ``has_postcode`` → ``geocode_structured``, else
                   ``geocode_freeform``; the right call fails at random 10% of the time (seeded
                   by instance and step); ``geocode_structured`` without a postcode always
                   fails, ``geocode_freeform`` with one fails 85% of the time
=================  =========================================================================

The last five (:data:`NEW_FAMILIES`) were written for the issue "Experience that transfers": their
feature names and values (MIME types, ratios such as ``16/9``, dates such as ``14/03/2026``, sizes
in MB) are unlike the first six, and each carries harmless features (dates, frame rates,
currencies, countries) a learner must not latch onto. Each reports ``latency_ms`` per call.
Every family computes its oracle (``Episode.oracle_steps``): the fewest steps for the instance
(expected fewest for ``address_geocode``).

Instance-specific values (urls, file paths, table and job names) must be passed back exactly, so
replaying another instance's concrete call fails where a generalized one works.

The families live in :mod:`~cluster.demo.envs_web` (form_submit, table_lookup),
:mod:`~cluster.demo.envs_data` (product_import, csv_export, db_insert),
:mod:`~cluster.demo.envs_roles` (data_sync), :mod:`~cluster.demo.envs_files`
(asset_preview, video_resize, archive_upload) and :mod:`~cluster.demo.envs_services`
(payment_settle, address_geocode).
"""

from __future__ import annotations

from collections.abc import Callable

from cluster.demo.env_base import Episode
from cluster.demo.envs_data import CsvExport, DbInsert, ProductImport
from cluster.demo.envs_files import ArchiveUpload, AssetPreview, VideoResize
from cluster.demo.envs_roles import DataSync
from cluster.demo.envs_services import AddressGeocode, PaymentSettle
from cluster.demo.envs_web import FormSubmit, TableLookup

OLD_FAMILIES: tuple[str, ...] = tuple(
    cls.family for cls in (FormSubmit, ProductImport, CsvExport, DbInsert, TableLookup, DataSync)
)
"""The six families the service and the agents were developed against."""
NEW_FAMILIES: tuple[str, ...] = tuple(
    cls.family for cls in (AssetPreview, VideoResize, ArchiveUpload, PaymentSettle, AddressGeocode)
)
"""The five families written for the transfer issue, one per rule shape it asks for."""
FAMILIES: dict[str, type[Episode]] = {
    cls.family: cls
    for cls in (
        FormSubmit,
        ProductImport,
        CsvExport,
        DbInsert,
        TableLookup,
        DataSync,
        AssetPreview,
        VideoResize,
        ArchiveUpload,
        PaymentSettle,
        AddressGeocode,
    )
}


EpisodeMaker = Callable[[str, int], Episode]
"""Makes a family's instance for a seed (``KeyError`` for a family it does not know); a benchmark
with families of its own passes one to :func:`cluster.demo.harness.run_bench`."""


def make_episode(family: str, seed: int, budget: int | None = None) -> Episode:
    """A fresh instance of the hand-written ``family`` for ``seed``.

    Raises:
        KeyError: Unknown family.
    """
    return FAMILIES[family](seed, budget)


__all__ = [
    "FAMILIES",
    "NEW_FAMILIES",
    "OLD_FAMILIES",
    "AddressGeocode",
    "ArchiveUpload",
    "AssetPreview",
    "CsvExport",
    "DataSync",
    "DbInsert",
    "EpisodeMaker",
    "FormSubmit",
    "PaymentSettle",
    "ProductImport",
    "TableLookup",
    "VideoResize",
    "make_episode",
]
