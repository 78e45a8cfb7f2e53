"""The five transfer families enforce their hidden rules, and every family's oracle is right."""

from __future__ import annotations

from typing import Any

import pytest

from cluster.demo.env_base import Call, Episode, StepResult
from cluster.demo.envs import (
    FAMILIES,
    NEW_FAMILIES,
    OLD_FAMILIES,
    AddressGeocode,
    ArchiveUpload,
    AssetPreview,
    PaymentSettle,
    VideoResize,
    make_episode,
)
from cluster.demo.envs_services import GEOCODER_NOISE


def call(action: str, **params: Any) -> Call:
    return Call(action=action, params=params)


def at_decision(episode: Episode) -> Episode:
    """Run the opening execution step."""
    view = episode.view()
    assert view is not None
    assert not view.is_decision
    assert episode.act(view.options[0]).status == "success"
    return episode


def option(episode: Episode, action: str) -> Call:
    view = episode.view()
    assert view is not None
    return next(o for o in view.options if o.action == action)


def try_each(make: Any, actions: tuple[str, ...]) -> dict[str, StepResult]:
    """Each action's answer on a fresh copy of the same instance, at its decision."""
    out = {}
    for action in actions:
        episode = at_decision(make())
        out[action] = episode.act(option(episode, action))
    return out


def cheapest(family: str, seed: int, prefix: tuple[Call, ...] = ()) -> float:
    """Fewest steps to finish a deterministic instance, by trying every naive option at every stage.

    A failed call leaves a deterministic episode as it was, so the cheapest path is made of
    successful calls only; the search replays each prefix on a fresh instance.
    """
    best = float("inf")
    probe = make_episode(family, seed, budget=100)
    for step in prefix:
        probe.act(step)
    view = probe.view()
    assert view is not None
    for candidate in view.options:
        episode = make_episode(family, seed, budget=100)
        for step in prefix:
            episode.act(step)
        before = episode.steps
        result = episode.act(candidate)
        if result.status != "success":
            continue
        spent = episode.steps - before
        best = min(best, spent if episode.succeeded else spent + cheapest(family, seed, (*prefix, candidate)))
    return best


def test_the_new_families_are_registered_apart_from_the_old_six() -> None:
    assert set(NEW_FAMILIES) | set(OLD_FAMILIES) == set(FAMILIES)
    assert not set(NEW_FAMILIES) & set(OLD_FAMILIES)
    assert len(NEW_FAMILIES) >= 4


def test_the_new_families_share_no_decision_feature_with_the_old_six() -> None:
    def decision_keys(families: tuple[str, ...]) -> set[str]:
        keys: set[str] = set()
        for family in families:
            episode = make_episode(family, 0, budget=100)
            while (view := episode.view()) is not None:
                if view.is_decision:
                    keys |= set(view.context) - {"goal"}
                _solve(episode, view.options)
        return keys

    assert not decision_keys(NEW_FAMILIES) & decision_keys(OLD_FAMILIES)


def _solve(episode: Episode, options: tuple[Call, ...]) -> None:
    assert any(episode.act(o).status == "success" for _ in range(4) for o in options)


@pytest.mark.parametrize("family", sorted(set(FAMILIES) - {"address_geocode"}))
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_the_oracle_is_the_cheapest_path_a_search_finds(family: str, seed: int) -> None:
    assert make_episode(family, seed).oracle_steps() == cheapest(family, seed)


@pytest.mark.parametrize(
    ("mime", "works"),
    [
        ("image/png", "rasterize_thumbnail"),
        ("image/jpeg", "rasterize_thumbnail"),
        ("image/webp", "rasterize_thumbnail"),
        ("application/pdf", "render_first_page"),
        ("application/epub+zip", "render_first_page"),
    ],
)
def test_asset_preview_maps_five_mime_types_onto_two_renderers(mime: str, works: str) -> None:
    def make() -> AssetPreview:
        episode = AssetPreview(4)
        episode.mime_type = mime
        return episode

    results = try_each(make, ("rasterize_thumbnail", "render_first_page", "preview_via_cdn", "embed_in_iframe"))
    assert {a for a, r in results.items() if r.status == "success"} == {works}
    assert all(r.latency_ms is not None for a, r in results.items() if not a.startswith(("preview", "embed")))
    assert make().oracle_steps() == 2


def test_asset_preview_rejects_another_instances_file() -> None:
    episode = at_decision(AssetPreview(4))
    assert episode.act(call("rasterize_thumbnail", asset="uploads/00000000.png", width=320)).status == "failure"


@pytest.mark.parametrize(("aspect", "oracle"), [("16/9", 2), ("4/3", 4), ("21/9", 4), ("9/16", 4), ("1/1", 4)])
def test_video_resize_cheap_scale_works_only_on_16_9_and_the_padded_encode_costs_three(
    aspect: str, oracle: int
) -> None:
    def make() -> VideoResize:
        episode = VideoResize(2)
        episode.aspect_ratio = aspect
        return episode

    results = try_each(make, ("scale_stream", "transcode_padded", "crop_to_fill"))
    assert (results["scale_stream"].status == "success") == (aspect == "16/9")
    padded, scaled = results["transcode_padded"], results["scale_stream"]
    assert padded.status == "success"
    assert (padded.steps, scaled.steps) == (3, 1)
    assert padded.latency_ms == 3 * (scaled.latency_ms or 0)
    assert results["crop_to_fill"].status == "failure"
    assert make().oracle_steps() == oracle
    expensive = at_decision(make())
    expensive.act(option(expensive, "transcode_padded"))
    assert expensive.succeeded
    assert expensive.steps == 4
    assert [r.cost()["steps"] for _, _, r in expensive.history] == [1, 3]


@pytest.mark.parametrize(
    ("size", "works"),
    [
        (0.3, "put_object"),
        (8.0, "put_object"),
        (8.1, "multipart_upload"),
        (512.0, "multipart_upload"),
        (512.1, "resumable_upload"),
        (9000.0, "resumable_upload"),
    ],
)
def test_archive_upload_has_one_method_per_size_band(size: float, works: str) -> None:
    def make() -> ArchiveUpload:
        episode = ArchiveUpload(7)
        episode.size_mb = size
        return episode

    results = try_each(make, ("put_object", "multipart_upload", "resumable_upload", "upload_via_ftp"))
    assert {a for a, r in results.items() if r.status == "success"} == {works}
    assert make().oracle_steps() == 2


def test_archive_sizes_fall_into_every_band() -> None:
    sizes = [ArchiveUpload(seed).size_mb for seed in range(60)]
    assert min(sizes) <= 8 < max(sizes)
    assert any(8 < s <= 512 for s in sizes)
    assert any(s > 512 for s in sizes)


@pytest.mark.parametrize(
    ("auth", "works", "oracle"),
    [
        ("approved", "capture_payment", 2),
        ("challenge_required", "start_3ds_challenge", 3),
        ("partially_approved", "capture_partial", 2),
    ],
)
def test_payment_settle_follows_what_the_authorization_returned(auth: str, works: str, oracle: int) -> None:
    def make() -> PaymentSettle:
        episode = PaymentSettle(3)
        episode.auth_result = auth
        return episode

    fresh = make()
    first = fresh.view()
    assert first is not None
    assert "auth_result" not in first.context  # only step 1's answer reveals it
    at_decision(fresh)
    decision = fresh.view()
    assert decision is not None
    assert decision.context["auth_result"] == auth
    assert auth in fresh.history[0][2].summary
    results = try_each(make, ("capture_payment", "start_3ds_challenge", "capture_partial", "void_authorization"))
    assert {a for a, r in results.items() if r.status == "success"} == {works}
    if auth == "approved":
        assert results["capture_partial"].status == "partial"
    assert make().oracle_steps() == oracle


def test_a_3ds_challenge_is_followed_by_a_capture() -> None:
    episode = PaymentSettle(3)
    episode.auth_result = "challenge_required"
    at_decision(episode)
    episode.act(option(episode, "start_3ds_challenge"))
    view = episode.view()
    assert view is not None
    assert view.stage == "capture"
    assert not view.is_decision
    episode.act(view.options[0])
    assert episode.succeeded
    assert episode.steps == episode.oracle_steps() == 3


def rates(has_postcode: bool, action: str, seeds: range) -> float:
    wins = 0
    for seed in seeds:
        episode = AddressGeocode(seed)
        episode.has_postcode = has_postcode
        at_decision(episode)
        wins += episode.act(option(episode, action)).status == "success"
    return wins / len(seeds)


def test_address_geocode_right_lookup_fails_about_one_time_in_ten_and_the_wrong_ones_mostly_fail() -> None:
    seeds = range(400)
    assert 0.85 <= rates(True, "geocode_structured", seeds) <= 0.95
    assert 0.85 <= rates(False, "geocode_freeform", seeds) <= 0.95
    assert rates(False, "geocode_structured", seeds) == 0
    assert 0.05 <= rates(True, "geocode_freeform", seeds) <= 0.25
    assert AddressGeocode(0).oracle_steps() == pytest.approx(1 + 1 / (1 - GEOCODER_NOISE))


def test_geocoder_noise_is_the_same_for_the_same_seed_and_step() -> None:
    def outcomes(seed: int) -> list[str]:
        episode = AddressGeocode(seed)
        episode.has_postcode = True
        at_decision(episode)
        return [episode.act(option(episode, "geocode_structured")).status for _ in range(6) if not episode.done]

    assert all(outcomes(seed) == outcomes(seed) for seed in range(30))
    assert len({tuple(outcomes(seed)) for seed in range(30)}) > 1  # the noise does vary between instances


def test_retrying_the_right_lookup_after_a_transient_failure_works() -> None:
    for seed in range(200):
        episode = AddressGeocode(seed)
        at_decision(episode)
        if episode.luck() < GEOCODER_NOISE:
            break
    right = option(episode, "geocode_structured" if episode.has_postcode else "geocode_freeform")
    assert episode.act(right).summary.startswith("503")
    while not episode.done:
        episode.act(right)
    assert episode.succeeded
