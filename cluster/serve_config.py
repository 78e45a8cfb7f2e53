"""Deployment knobs read from ``deploy/*.yaml``: replicas, workers, leases and job intervals, never hard-coded.

What every runtime shares (the attribution batch size and scorer) is in :class:`~cluster.settings.Settings`.
"""

from __future__ import annotations

import ipaddress
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _ip_address(value: str) -> str:
    ipaddress.ip_address(value)
    return value


class HttpConfig(_Section):
    host: str = Field(
        default="127.0.0.1",
        description="Interface of the MCP endpoint. 0.0.0.0 exposes it on every interface (behind your TLS proxy).",
    )
    port: int = Field(default=8000, ge=1, le=65535)
    ingress: Literal["haproxy", "proxy"] = Field(
        default="haproxy",
        description=(
            "haproxy: Ray Serve's bundled HAProxy listens on the port and forwards straight to the "
            "replicas (direct ingress). proxy: Serve's Python proxy actor relays every request "
            "through a Ray call, several times slower per request."
        ),
    )
    stats_host: Annotated[str, AfterValidator(_ip_address)] = Field(
        default="127.0.0.1",
        description=(
            "Interface of HAProxy's stats page and Prometheus exporter when hindsight serve starts Ray "
            "itself. Loopback unless something off this host must scrape HAProxy; the service's own "
            "metrics are at /metrics on the MCP port."
        ),
    )


class IngressConfig(_Section):
    num_replicas: int = Field(default=1, ge=1)
    max_ongoing_requests: int = Field(default=200, ge=1)
    num_cpus: float = Field(default=0.5, ge=0)
    resources: dict[str, float] = Field(
        default_factory=dict,
        description=(
            'Ray custom resources each replica needs, e.g. {"serve": 1}: places replicas on the nodes that '
            "declare them (ray start --resources), apart from the attribution workers."
        ),
    )


def _refuse_moved(data: Any, key: str, setting: str) -> Any:
    """A key that became a setting: named in the error, rather than refused as an unknown key."""
    if isinstance(data, dict) and key in data:
        raise ValueError(
            f"{key} is the {setting} setting (HINDSIGHT_{setting.upper()}) now, one value for every runtime; "
            "remove it here"
        )
    return data


class AttributionConfig(_Section):
    """The live attribution pool. Its batch size and scorer are settings (``analysis_batch_size``,
    ``scorer``), shared with stdio, reprocess and the scheduled jobs."""

    workers: int = Field(default=1, ge=0, description="Ray actors running attribution; 0 disables analysis.")
    poll_interval_s: float = Field(default=0.1, gt=0, le=60)
    history_limit: int = Field(default=200, ge=0, description="Stored trajectories contrasted with each batch.")
    num_cpus: float = Field(default=0.5, ge=0)
    resources: dict[str, float] = Field(
        default_factory=dict,
        description=(
            'Ray custom resources each worker needs, e.g. {"attribution": 1}: places workers on the nodes that '
            "declare them (ray start --resources), apart from the replicas."
        ),
    )
    lease_s: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        description=(
            "How long a worker's claim on a batch outlives its last heartbeat (beats come every third "
            "of it): work a dead worker held waits this long for another one."
        ),
    )
    run_quiet_s: float = Field(
        default=30.0,
        ge=0,
        le=86_400,
        description=(
            "A multi-agent run's trajectories are analysed once the run has been quiet this long (no "
            "role open, none started or finalized), so later roles' outcomes reach earlier ones; 0: at once."
        ),
    )
    run_wait_s: float = Field(
        default=1800.0, ge=0, le=86_400, description="The longest a run's trajectory waits after its finalize."
    )

    @model_validator(mode="before")
    @classmethod
    def _batch_size_is_a_setting(cls, data: Any) -> Any:
        return _refuse_moved(data, "batch_size", "analysis_batch_size")


class MaintenanceConfig(_Section):
    interval_s: float = Field(default=300.0, gt=0, description="Seconds between memory maintenance passes.")
    enabled: bool = True


# --- scheduled jobs (docs/jobs.md, "Scheduled jobs") -------------------------------------------


class MaintenanceParameters(_Section):
    """The memory upkeep pass takes no parameters: its policies come from the memory settings."""


class Vectors(StrEnum):
    """Which vectors a reindex rebuilds."""

    TEMPLATES = "templates"
    MEMORIES = "memories"
    ALL = "all"


class ReindexParameters(_Section):
    what: Vectors = Field(
        default=Vectors.TEMPLATES,
        description="Experience templates (a Ray Data job), long-term memories (in the scheduler's process), or all.",
    )
    owner: str | None = Field(default=None, min_length=1, description="Only this owner's vectors; default all.")
    actors: int = Field(default=1, ge=1, description="Embedding actors of the Ray Data pool.")
    batch_size: int = Field(default=256, ge=1, description="Texts embedded per call.")


class ConsolidateParameters(_Section):
    """The new versions learn with the ``scorer`` setting, as the live workers do."""

    actors: int = Field(default=1, ge=1, description="Attribution actors of the Ray Data pool.")
    num_cpus: float = Field(default=0.5, ge=0, description="CPUs each attribution actor asks Ray for.")
    holdout: float = Field(
        default=0.2, gt=0, lt=1, description="Newest share of an owner's trajectories both versions are judged on."
    )

    @model_validator(mode="before")
    @classmethod
    def _scorer_is_a_setting(cls, data: Any) -> Any:
        return _refuse_moved(data, "scorer", "scorer")


class _Job(_Section):
    interval_s: float = Field(gt=0, le=30 * 86400, description="Seconds from the end of one run to the next.")
    lease_s: float = Field(
        default=60.0,
        ge=1,
        le=3600,
        description=(
            "How long a scheduler's hold on the job outlives its last heartbeat (beats every third of "
            "it): a run whose scheduler died is resumed by another after this long."
        ),
    )
    enabled: bool = True
    run_at_start: bool = Field(
        default=False,
        description="Also run a pass when the scheduler starts, due or not (e.g. to redo work a crash left queued).",
    )


class MaintenanceJob(_Job):
    kind: Literal["maintenance"]
    parameters: MaintenanceParameters = Field(default_factory=MaintenanceParameters)

    @property
    def uses_ray(self) -> bool:
        return False


class ReindexJob(_Job):
    kind: Literal["reindex"]
    parameters: ReindexParameters = Field(default_factory=ReindexParameters)

    @property
    def uses_ray(self) -> bool:
        """The templates are a Ray Data job; the memories are rebuilt in the caller's process."""
        return self.parameters.what is not Vectors.MEMORIES


class ConsolidateJob(_Job):
    kind: Literal["consolidate"]
    parameters: ConsolidateParameters = Field(default_factory=ConsolidateParameters)

    @property
    def uses_ray(self) -> bool:
        return True


Job = MaintenanceJob | ReindexJob | ConsolidateJob
JobConfig = Annotated[Job, Field(discriminator="kind")]
JobName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")]

# The name the ``maintenance:`` section's job runs under.
MAINTENANCE_JOB = "maintenance"


class ServeConfig(_Section):
    http: HttpConfig = Field(default_factory=HttpConfig)
    ingress: IngressConfig = Field(default_factory=IngressConfig)
    attribution: AttributionConfig = Field(default_factory=AttributionConfig)
    maintenance: MaintenanceConfig = Field(
        default_factory=MaintenanceConfig,
        description="Shorthand for a job named maintenance; ignored when jobs: declares a maintenance job.",
    )
    jobs: dict[JobName, JobConfig] = Field(
        default_factory=dict, description="Scheduled jobs by name (lower case, digits, - and _)."
    )

    def scheduled_jobs(self) -> dict[str, Job]:
        """The enabled jobs, with the ``maintenance:`` section's job unless ``jobs:`` declares one of that kind."""
        jobs = {name: job for name, job in self.jobs.items() if job.enabled}
        declared = any(job.kind == "maintenance" for job in self.jobs.values())
        if self.maintenance.enabled and not declared and MAINTENANCE_JOB not in self.jobs:
            # As the maintenance actor before the scheduler: a first pass at once, then every interval.
            jobs[MAINTENANCE_JOB] = MaintenanceJob(
                kind="maintenance", interval_s=self.maintenance.interval_s, run_at_start=True
            )
        return dict(sorted(jobs.items()))


def load_serve_config(path: Path | None) -> ServeConfig:
    """The file's settings over the defaults; no file means all defaults."""
    if path is None:
        return ServeConfig()
    data = yaml.safe_load(path.read_text()) or {}
    return ServeConfig.model_validate(data)
