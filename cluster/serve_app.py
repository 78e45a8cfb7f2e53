"""The Ray Serve application: replicas of the HTTP/MCP ingress, each with its own services."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from ray import serve
from ray.serve.deployment import Application
from starlette.types import ASGIApp

from cluster.auth import OwnerResolver
from cluster.http import build_http_app
from cluster.net import free_port
from cluster.serve_config import HttpConfig, IngressConfig
from cluster.services import build_services
from cluster.settings import Settings, load_settings

logger = logging.getLogger(__name__)


@serve.deployment(name="hindsight", logging_config={"enable_access_log": False})
@serve.ingress()
class Ingress:
    """One replica: opens the stores, then hands Serve the ASGI app built on them."""

    def __init__(self, settings: Settings, loopback_only: bool = False) -> None:
        if loopback_only:
            _inter_deployment_grpc_on_loopback()
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


def _inter_deployment_grpc_on_loopback() -> None:
    """Bind this replica's inter-deployment gRPC server to the loopback instead of every interface.

    Serve opens it on ``[::]:0`` once the replica's class is constructed, with no setting to
    change that. On a local Ray instance the node's address is the loopback one (see
    ``cluster.runner.ensure_ray``), so nothing needs to reach it from elsewhere.
    """
    names = _replica_module_names()
    bind: Callable[[Any, str], Any] = names["add_port_to_grpc_server"]
    if getattr(bind, "hindsight_loopback", False):
        return

    def on_loopback(server: Any, address: str) -> Any:
        if address.startswith("[::]:"):
            address = "127.0.0.1:" + address.removeprefix("[::]:")
        return bind(server, address)

    on_loopback.hindsight_loopback = True  # type: ignore[attr-defined]
    names["add_port_to_grpc_server"] = on_loopback


def _replica_module_names() -> dict[str, Any]:
    """The globals of Ray Serve's replica module, through which a replica binds its gRPC port.

    Private to Ray: Serve 2.60 has no public setting for that address, so this is the one place
    that reaches into Serve's internals. It imports nothing (``lint-imports`` forbids importing
    ``ray.serve._private``): the module is loaded already, since it is what constructs this class.
    Should Serve rename the module or the function, the replica fails to start (KeyError); should
    it stop binding through that function, tests/reliability/test_listeners.py fails (it finds the
    replica's gRPC port on every interface).
    """
    return vars(sys.modules["ray.serve._private.replica"])


def build_app(
    settings: Settings, ingress: IngressConfig, env: dict[str, str] | None = None, *, loopback_only: bool = False
) -> Application:
    """The Serve application; ``env`` is the replicas' share of :func:`ingress_env`.

    ``loopback_only``: the replicas run on a local Ray instance whose node address is the loopback,
    so their internal gRPC server listens there only.
    """
    actor_options: dict[str, object] = {"num_cpus": ingress.num_cpus}
    if ingress.resources:
        actor_options["resources"] = dict(ingress.resources)
    if env:
        actor_options["runtime_env"] = {"env_vars": env}
    return Ingress.options(  # type: ignore[attr-defined,no-any-return]
        num_replicas=ingress.num_replicas,
        max_ongoing_requests=ingress.max_ongoing_requests,
        ray_actor_options=actor_options,
    ).bind(settings, loopback_only)


def ingress_env(http: HttpConfig) -> dict[str, str]:
    """Environment the Serve controller and the replicas need for ``http.ingress``.

    Serve reads these flags when its processes start, so they travel as runtime environments of
    the controller and the replicas rather than as settings of a running instance.
    """
    if http.ingress == "proxy":
        return {}
    return {
        # HAProxy on the port, each replica serving HTTP itself (Serve's direct ingress).
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        # The local HAProxy drops a stopping replica at once; Serve's 30 s default hold is meant
        # for cloud load balancers and would only slow every stop and redeploy.
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
        # HAProxy's side listeners (fallback proxy, stats, metrics) have fixed default ports; free
        # ones let two instances share a machine (a running service and a test run).
        "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": str(free_port()),
        "RAY_SERVE_HAPROXY_STATS_PORT": str(free_port()),
        "RAY_SERVE_HAPROXY_METRICS_PORT": str(free_port()),
        # The app runs on the replica's own event loop: by default Serve gives user code a loop on
        # another thread, and every request crosses between the two (measured: 7.1 -> 5.3 ms of
        # replica CPU a memory call). The app never blocks its loop for long: store work runs on
        # threads, and an inline SQLite capture write takes ~0.5 ms.
        "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
    }
