"""Deployment knobs read from ``deploy/*.yaml``: replicas, workers and batch sizes, never hard-coded."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field


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


class AttributionConfig(_Section):
    workers: int = Field(default=1, ge=0, description="Ray actors running attribution; 0 disables analysis.")
    batch_size: int | None = Field(default=None, ge=1, description="Default: the analysis_batch_size setting.")
    poll_interval_s: float = Field(default=0.1, gt=0, le=60)
    history_limit: int = Field(default=200, ge=0, description="Stored trajectories contrasted with each batch.")
    num_cpus: float = Field(default=0.5, ge=0)
    lease_s: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        description=(
            "How long a worker's claim on a batch outlives its last heartbeat (beats come every third "
            "of it): work a dead worker held waits this long for another one."
        ),
    )


class MaintenanceConfig(_Section):
    interval_s: float = Field(default=300.0, gt=0, description="Seconds between memory maintenance passes.")
    enabled: bool = True


class ServeConfig(_Section):
    http: HttpConfig = Field(default_factory=HttpConfig)
    ingress: IngressConfig = Field(default_factory=IngressConfig)
    attribution: AttributionConfig = Field(default_factory=AttributionConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)


def load_serve_config(path: Path | None) -> ServeConfig:
    """The file's settings over the defaults; no file means all defaults."""
    if path is None:
        return ServeConfig()
    data = yaml.safe_load(path.read_text()) or {}
    return ServeConfig.model_validate(data)
