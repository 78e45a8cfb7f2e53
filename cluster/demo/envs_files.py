"""File-handling families: previews by MIME type, resizing clips by aspect ratio, uploading by size.

Hidden rules are listed in :mod:`cluster.demo.envs`. Every call reports a simulated
``latency_ms``; ``video_resize``'s padded re-encode also costs three steps.
"""

from __future__ import annotations

import math
from types import MappingProxyType

from pydantic import JsonValue

from cluster.demo.env_base import (
    Call,
    Episode,
    StepResult,
    StepView,
    date_text,
    fail,
    log_uniform,
    make_view,
    mismatch,
    ok,
    token,
    tool_call,
)

RASTER_TYPES = ("image/png", "image/jpeg", "image/webp")
PAGED_TYPES = ("application/pdf", "application/epub+zip")
EXTENSIONS = MappingProxyType(
    {
        "image/png": "png",
        "image/jpeg": "jpg",
        "image/webp": "webp",
        "application/pdf": "pdf",
        "application/epub+zip": "epub",
    }
)


class AssetPreview(Episode):
    """Render a preview image for an uploaded attachment (five MIME types, two renderers)."""

    family = "asset_preview"
    task_type = "preview"
    first_stage = "fetch"
    decoys = MappingProxyType(
        {
            "preview": (
                ("preview_via_cdn", "the CDN preview service is off for private uploads"),
                ("embed_in_iframe", "the mail client strips iframes"),
            )
        }
    )
    default_budget = 8

    def __init__(self, seed: int, budget: int | None = None) -> None:
        super().__init__(seed, budget)
        self.mime_type = self.rng.choice((*RASTER_TYPES, *PAGED_TYPES))
        self.size_kb = log_uniform(self.rng, 12, 40_000)
        self.uploaded_on = date_text(self.rng)
        self.asset = f"uploads/{token(self.rng, 8)}.{EXTENSIONS[self.mime_type]}"

    @property
    def task(self) -> str:
        return f"Make a preview image of the attachment {self.asset} uploaded on {self.uploaded_on}"

    def _view(self, stage: str) -> StepView:
        if stage == "fetch":
            return make_view(
                stage,
                {"goal": "fetch the attachment", "assets": [self.asset]},
                tool_call("fetch_asset", asset=self.asset),
            )
        context: dict[str, JsonValue] = {
            "goal": "render a preview",
            "mime_type": self.mime_type,
            "size_kb": self.size_kb,
            "uploaded_on": self.uploaded_on,
            "assets": [self.asset],
        }
        return make_view(
            stage,
            context,
            tool_call("rasterize_thumbnail", asset=self.asset, width=320),
            tool_call("render_first_page", asset=self.asset, dpi=96),
        )

    def _judge(self, stage: str, call: Call) -> StepResult:
        missing = mismatch(call, "asset", self.asset, "asset")
        if missing is not None:
            return missing
        if stage == "fetch":
            return ok(f"{self.mime_type}, {self.size_kb} KB", latency_ms=80)
        if call.action == "rasterize_thumbnail":
            if self.mime_type in RASTER_TYPES:
                return ok("thumbnail written", latency_ms=120)
            return fail(f"cannot decode {self.mime_type} as a bitmap", latency_ms=40)
        if self.mime_type in PAGED_TYPES:
            return ok("first page rendered", latency_ms=450)
        return fail(f"{self.mime_type} has no pages to render", latency_ms=40)

    def _next(self, stage: str, call: Call) -> str | None:
        return "preview" if stage == "fetch" else None

    def oracle_steps(self) -> float:
        return 2.0


PLAYER_ASPECT = "16/9"
PADDED_COST = 3


class VideoResize(Episode):
    """Fit a clip to a 16/9 player: a cheap scale works only on 16/9 sources, a padded re-encode always.

    The re-encode costs three steps (decode, pad, encode) and three times the latency, so an
    agent that learned only *what works* spends more than one that also learned *what is cheap*.
    """

    family = "video_resize"
    task_type = "transcode"
    first_stage = "probe"
    decoys = MappingProxyType(
        {
            "resize": (
                ("crop_to_fill", "cropping is not allowed: captions sit at the frame edge"),
                ("publish_as_is", "the player rejects clips that are not 1280x720"),
            )
        }
    )
    default_budget = 8

    def __init__(self, seed: int, budget: int | None = None) -> None:
        super().__init__(seed, budget)
        # Half the clips are already 16/9: both calls work there, and only cost tells them apart.
        self.aspect_ratio = self.rng.choice((PLAYER_ASPECT,) * 4 + ("4/3", "21/9", "9/16", "1/1"))
        self.frame_rate = self.rng.choice(("30000/1001", "25/1", "24000/1001", "60/1"))
        self.duration_s = self.rng.randint(8, 900)
        self.clip = f"clips/{token(self.rng, 8)}.mov"

    @property
    def task(self) -> str:
        return f"Resize the {self.duration_s} s clip {self.clip} for the 16/9 web player"

    def _view(self, stage: str) -> StepView:
        if stage == "probe":
            return make_view(
                stage, {"goal": "probe the clip", "clips": [self.clip]}, tool_call("probe_clip", clip=self.clip)
            )
        context: dict[str, JsonValue] = {
            "goal": "fit the clip to the player",
            "aspect_ratio": self.aspect_ratio,
            "frame_rate": self.frame_rate,
            "duration_s": self.duration_s,
            "clips": [self.clip],
        }
        return make_view(
            stage,
            context,
            tool_call("scale_stream", clip=self.clip, size="1280x720"),
            tool_call("transcode_padded", clip=self.clip, size="1280x720", pad="letterbox"),
        )

    def _scale_ms(self) -> int:
        return 300 + 2 * self.duration_s

    def _judge(self, stage: str, call: Call) -> StepResult:
        missing = mismatch(call, "clip", self.clip, "clip")
        if missing is not None:
            return missing
        if stage == "probe":
            return ok(f"{self.aspect_ratio} at {self.frame_rate} fps, {self.duration_s} s", latency_ms=60)
        if call.action == "transcode_padded":
            return ok("re-encoded with letterbox bars", steps=PADDED_COST, latency_ms=PADDED_COST * self._scale_ms())
        if self.aspect_ratio == PLAYER_ASPECT:
            return ok("scaled to 1280x720", latency_ms=self._scale_ms())
        return fail(
            f"scaling {self.aspect_ratio} to {PLAYER_ASPECT} stretches the picture; QA rejected it",
            latency_ms=self._scale_ms(),
        )

    def _next(self, stage: str, call: Call) -> str | None:
        return "resize" if stage == "probe" else None

    def oracle_steps(self) -> float:
        return 1.0 + (1 if self.aspect_ratio == PLAYER_ASPECT else PADDED_COST)


PUT_LIMIT_MB = 8.0
MULTIPART_LIMIT_MB = 512.0
ARCHIVE_TYPES = MappingProxyType(
    {"application/gzip": "tar.gz", "application/zip": "zip", "application/x-tar": "tar", "application/zstd": "tar.zst"}
)


class ArchiveUpload(Episode):
    """Upload a backup archive to object storage: three size bands, one upload method each."""

    family = "archive_upload"
    task_type = "upload"
    first_stage = "stat"
    decoys = MappingProxyType({"upload": (("upload_via_ftp", "the bucket has no FTP gateway"),)})
    default_budget = 8

    def __init__(self, seed: int, budget: int | None = None) -> None:
        super().__init__(seed, budget)
        # Spread over orders of magnitude so each band gets about a third of the instances.
        self.size_mb = round(math.exp(self.rng.uniform(math.log(0.25), math.log(16_384))), 1)
        self.content_type = self.rng.choice(tuple(ARCHIVE_TYPES))
        self.created_on = date_text(self.rng)
        self.key = f"backups/{token(self.rng, 8)}.{ARCHIVE_TYPES[self.content_type]}"

    @property
    def task(self) -> str:
        return f"Upload the backup {self.key} made on {self.created_on} to the archive bucket"

    def _view(self, stage: str) -> StepView:
        if stage == "stat":
            return make_view(
                stage, {"goal": "inspect the archive", "archives": [self.key]}, tool_call("stat_file", path=self.key)
            )
        context: dict[str, JsonValue] = {
            "goal": "upload the archive",
            "size_mb": self.size_mb,
            "content_type": self.content_type,
            "created_on": self.created_on,
            "archives": [self.key],
        }
        return make_view(
            stage,
            context,
            tool_call("put_object", key=self.key),
            tool_call("multipart_upload", key=self.key, part_mb=16),
            tool_call("resumable_upload", key=self.key, chunk_mb=64),
        )

    def _judge(self, stage: str, call: Call) -> StepResult:
        if stage == "stat":
            return mismatch(call, "path", self.key, "file") or ok(
                f"{self.size_mb} MB, {self.content_type}", latency_ms=20
            )
        missing = mismatch(call, "key", self.key, "archive")
        if missing is not None:
            return missing
        transfer_ms = round(40 + 9 * self.size_mb)
        if call.action == "put_object":
            if self.size_mb > PUT_LIMIT_MB:
                return fail(f"EntityTooLarge: a single PUT takes at most {PUT_LIMIT_MB:g} MB", latency_ms=40)
            return ok("stored", latency_ms=transfer_ms)
        if call.action == "multipart_upload":
            if self.size_mb <= PUT_LIMIT_MB:
                return fail(f"EntityTooSmall: multipart parts must exceed {PUT_LIMIT_MB:g} MB", latency_ms=40)
            if self.size_mb > MULTIPART_LIMIT_MB:
                return fail(
                    f"upload window closed after {MULTIPART_LIMIT_MB:g} MB; use a resumable session",
                    latency_ms=round(40 + 9 * MULTIPART_LIMIT_MB),
                )
            return ok("stored in parts", latency_ms=transfer_ms)
        if self.size_mb <= MULTIPART_LIMIT_MB:
            return fail(f"resumable sessions are reserved for archives over {MULTIPART_LIMIT_MB:g} MB", latency_ms=40)
        return ok("stored through a resumable session", latency_ms=transfer_ms)

    def _next(self, stage: str, call: Call) -> str | None:
        return "upload" if stage == "stat" else None

    def oracle_steps(self) -> float:
        return 2.0
