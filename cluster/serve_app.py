"""The Ray Serve application: replicas of the HTTP/MCP ingress, each with its own services."""

from __future__ import annotations

import logging

from pydantic import BaseModel, ConfigDict, Field
from ray import serve
from ray.serve.deployment import Application
from starlette.types import ASGIApp

from cluster.auth import OwnerResolver
from cluster.http import build_http_app
from cluster.serve_config import IngressConfig
from cluster.services import build_services
from cluster.settings import Settings, load_settings

logger = logging.getLogger(__name__)


@serve.deployment(name="hindsight", logging_config={"enable_access_log": False})
@serve.ingress()
class Ingress:
    """One replica: opens the stores, then hands Serve the ASGI app built on them."""

    def __init__(self, settings: Settings) -> None:
        self._services = build_services(settings, migrate=False)
        self._owners = OwnerResolver(settings.auth_tokens, settings.local_owner)

    def __serve_build_asgi_app__(self) -> ASGIApp:
        # Built inside the replica: an app object built in the driver cannot be serialized.
        return build_http_app(self._services, self._owners)

    def __del__(self) -> None:
        self._services.close()


class AppArgs(BaseModel):
    """Arguments of :func:`app_builder`, as a Serve config file or a KubeRay RayService passes them."""

    model_config = ConfigDict(extra="forbid")

    ingress: IngressConfig = Field(default_factory=IngressConfig)


def app_builder(args: AppArgs) -> Application:
    """Entry point for ``serve run`` / RayService ``import_path: cluster.serve_app:app_builder``.

    Settings come from the replicas' ``HINDSIGHT_*`` environment; the schema must already be
    migrated (``hindsight migrate``) and Milvus must be a server URI.
    """
    return build_app(load_settings(), args.ingress)


def build_app(settings: Settings, ingress: IngressConfig) -> Application:
    return Ingress.options(  # type: ignore[attr-defined,no-any-return]
        num_replicas=ingress.num_replicas,
        max_ongoing_requests=ingress.max_ongoing_requests,
        ray_actor_options={"num_cpus": ingress.num_cpus},
    ).bind(settings)
