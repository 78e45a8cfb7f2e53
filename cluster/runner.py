"""Start and stop the whole service on Ray: the Serve app with the MCP endpoint and the attribution pool.

Used by ``hindsight serve``, the demo, benchmarks and the end-to-end tests, so they all run the same
thing.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import IO, Any

import anyio
import httpx
import ray
from ray import serve

from actors.pool import kill_pool, start_background, stop_pool, wait_ready
from cluster.core.errors import HindsightError
from cluster.experience.repository import SqlExperienceStore
from cluster.metrics import Metrics, metrics_dir, reset_metrics_dir
from cluster.net import HaproxyGuard, UnsafeRunDir, port_holders, port_taken
from cluster.serve_app import build_app, ingress_env
from cluster.serve_config import HttpConfig, ServeConfig
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.files import private_dir
from cluster.storage.migrate import upgrade
from cluster.storage.milvus import MilvusLiteServer, is_lite_target
from cluster.trajectories.repository import SqlTrajectoryStore
from pipelines.jobs import run_job

logger = logging.getLogger(__name__)

APP_NAME = "hindsight"

__all__ = ["APP_NAME", "PortInUse", "RunningService", "StartFailed", "port_taken", "start_service"]

# Ray's switch for single-host platforms. Off, Ray takes the loopback address as the node's
# address instead of turning 127.0.0.1 into the host's routable one, and a node on the loopback
# address binds its GCS, raylet and worker gRPC servers and its agents to the loopback only
# (on every interface otherwise). A local instance serves this host only, so it is always off.
LOOPBACK_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def ensure_ray(settings: Settings, num_cpus: int | None = None, *, quiet: bool = False) -> None:
    """Join the configured cluster, or start a local Ray instance once per process.

    ``quiet`` keeps the workers' and replicas' logs out of this terminal (they stay in Ray's log
    folder): for the demo and benchmarks, whose output is a table.
    """
    if ray.is_initialized():
        return
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": not quiet}
    if quiet or not logger.isEnabledFor(logging.DEBUG):
        # Ray's own start-up lines are for Ray's developers; -v (DEBUG) shows them.
        options["logging_level"] = logging.WARNING
        logging.getLogger("ray").setLevel(logging.WARNING)
    if settings.ray_address:
        ray.init(address=settings.ray_address, **options)
        return
    # Unix socket paths are limited to ~100 bytes: keep Ray's session directory short.
    temp_dir = os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()
    _loopback_only_ray()
    ray.init(num_cpus=num_cpus, _temp_dir=os.path.join(temp_dir, "ray"), _node_ip_address="127.0.0.1", **options)


def _loopback_only_ray() -> None:
    """Make the local Ray instance about to start listen on the loopback interface only.

    Ray reads the switch when it is imported, so it is set both for the processes ray.init starts
    (environment) and in this already-imported driver (the module value ray.init consults).

    Private to Ray: 2.60 has no public setting for it, so this and
    :func:`cluster.serve_app._replica_module_names` are the two places that reach into Ray's
    internals. Neither imports a private module (``lint-imports`` forbids it); the module is
    loaded already, since ``ray`` imports it. Should Ray rename the module, the start fails
    here (KeyError); should it stop reading the constant, tests/reliability/test_listeners.py
    fails (the driver then listens on every interface).
    """
    os.environ[LOOPBACK_ONLY_ENV] = "0"
    vars(sys.modules["ray._private.ray_constants"])["ENABLE_RAY_CLUSTER"] = False


class StartFailed(HindsightError):
    """The service did not start; everything the attempt had started is stopped again."""


class PortInUse(StartFailed):
    """The HTTP port is taken by a process other than this Ray instance's Serve."""


@dataclass
class RunningService:
    settings: Settings
    config: ServeConfig
    url: str
    workers: list[Any] = field(default_factory=list)
    milvus_server: MilvusLiteServer | None = None
    metrics_env: dict[str, str] = field(default_factory=dict)
    owner_lock: IO[str] | None = None

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp/"

    def start_workers(self) -> None:
        if not self.workers:
            self.workers = start_background(self.settings, self.config, self.metrics_env, run_job=run_job)

    def stop_workers(self) -> None:
        stop_pool(self.workers)
        self.workers = []

    def stop(self) -> None:
        """Stop the pool and the Serve app; Ray itself stays up for whoever started it."""
        try:
            self.stop_workers()
            serve.delete(APP_NAME)
        finally:
            if self.milvus_server is not None:
                self.milvus_server.stop()
            if self.owner_lock is not None:
                self.owner_lock.close()
                self.owner_lock = None


async def wait_until_analysed(db: Database, timeout_s: float = 300) -> None:
    """Return once the attribution queue is empty and every learned template is indexed."""
    with anyio.fail_after(timeout_s):
        while True:
            with db.read() as session:
                if (
                    SqlTrajectoryStore(session).queue_depth() == 0
                    and SqlExperienceStore(session).index_backlog_size() == 0
                ):
                    return
            await anyio.sleep(0.1)


def start_service(
    settings: Settings, config: ServeConfig, *, quiet: bool = False, start_timeout_s: float = 120.0
) -> RunningService:
    """Migrate the SQL store, deploy the MCP app and start the attribution workers.

    Returns once ``/health`` answers 200 on the port and every worker is constructed. If any step
    fails, or SIGTERM/SIGINT arrives meanwhile, what this call started is stopped again (workers,
    the Serve app, Serve itself with its HAProxy if this call started it, the Milvus Lite server)
    and the error propagates; Ray stays up, as after :meth:`RunningService.stop`.

    On a local Ray instance, HAProxy runs under :class:`~cluster.net.HaproxyGuard`: its side
    listeners stay on ``http.stats_host``, it dies with the Serve process that started it, and
    HAProxy processes an earlier, killed start on the same data directory left are ended first.

    Raises:
        PortInUse: another process listens on the port, or this Ray instance's Serve listens on
            a different one (Serve keeps its port until ``serve.shutdown()``).
        StartFailed: another service runs on the data directory, or ``/health`` did not answer
            200 or a worker did not start within ``start_timeout_s``.
    """
    private_dir(settings.data_dir)
    upgrade(settings.sql_url())
    with _exit_on_sigterm(), contextlib.ExitStack() as undo:
        # Each step registers its undo as soon as it has started; success pops them all.
        owner_lock = _own_data_dir(settings)
        undo.callback(owner_lock.close)
        if settings.ray_address is None and not ray.is_initialized():
            # Before Ray starts (seconds, ~0.5 GiB): no Serve of this process can hold the port yet.
            _check_port(config.http, None)
        ensure_ray(settings, quiet=quiet)
        serving = _serve_port()
        guard_env: dict[str, str] = {}
        if serving is None and settings.ray_address is None and config.http.ingress == "haproxy":
            guard_env = _guard_haproxy(settings, config.http)
        serve_starts = _check_port(config.http, serving)
        milvus_server = None
        if is_lite_target(settings.milvus_target()):
            # This process owns the Lite file and serves it; replicas and workers connect by URI.
            milvus_server = MilvusLiteServer(settings.milvus_target())
            undo.callback(_quietly, "stop Milvus Lite", milvus_server.stop)
            settings = settings.model_copy(update={"milvus_uri": milvus_server.start()})
        metrics_env = reset_metrics_dir(metrics_dir(settings.data_dir))
        running = RunningService(
            settings,
            config,
            f"http://{config.http.host}:{config.http.port}",
            milvus_server=milvus_server,
            metrics_env=metrics_env,
            owner_lock=owner_lock,
        )
        env = ingress_env(config.http)
        # Serve's HAProxy manager is started by the controller and inherits its environment.
        controller_env = env | guard_env
        if serve_starts:
            undo.callback(_quietly, "shut Serve down", serve.shutdown)
        serve.start(
            http_options={"host": config.http.host, "port": config.http.port},
            controller_options={"runtime_env": {"env_vars": controller_env}} if controller_env else None,
            # Serve's controller, proxies and HAProxy manager log every reload at INFO; warnings stay.
            logging_config={"log_level": "DEBUG" if logger.isEnabledFor(logging.DEBUG) else "WARNING"},
        )
        if not logger.isEnabledFor(logging.DEBUG):
            logging.getLogger("ray.serve").setLevel(logging.WARNING)  # this driver's own Serve lines
        # Before serve.run: a run interrupted half way leaves an application deploying.
        undo.callback(_quietly, "delete the Serve app", serve.delete, APP_NAME)
        app = build_app(settings, config.ingress, env | metrics_env, loopback_only=settings.ray_address is None)
        serve.run(app, name=APP_NAME, route_prefix="/")
        undo.callback(_quietly, "end the workers", lambda: kill_pool(running.workers))
        running.start_workers()
        deadline = time.monotonic() + start_timeout_s
        wait_healthy(running.url, start_timeout_s)
        try:
            wait_ready(running.workers, max(deadline - time.monotonic(), 0.1))
        except ray.exceptions.GetTimeoutError as exc:
            raise StartFailed(
                f"the attribution workers did not start in {start_timeout_s:.0f}s "
                f"(do the nodes have {config.attribution.num_cpus} CPUs free per worker?)"
            ) from exc
        except ray.exceptions.RayActorError as exc:
            raise StartFailed(f"an attribution worker failed to start: {exc}") from exc
        undo.pop_all()
    logger.info("hindsight is serving MCP at %s", running.mcp_url)
    return running


def _quietly(what: str, fn: Callable[..., object], *args: object) -> None:
    """Run one undo step; a failing step is logged and the others still run, so the start's own
    error is the one that propagates."""
    try:
        fn(*args)
    except Exception:
        logger.exception("after a failed start, could not %s", what)


def _raise_exit(signum: int, _: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _exit_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into ``SystemExit`` while the service starts, so the start's cleanup runs.

    The default action would end the process at once and leave the Serve app deployed on a Ray
    cluster this process does not own. Ray's driver does the same once ``ray.init`` ran.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _raise_exit)
    try:
        yield
    finally:
        # Leave a handler somebody installed meanwhile (ray.init does) in place.
        if signal.getsignal(signal.SIGTERM) is _raise_exit and previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _serve_port() -> int | None:
    """The HTTP port of this Ray instance's Serve, or ``None`` if Serve is not running."""
    # Serve has no public getter for its HTTP options; its controller client holds them.
    from ray.serve.context import _get_global_client

    client = _get_global_client(raise_if_no_controller_running=False)
    return None if client is None else int(client.http_config.port)


def _own_data_dir(settings: Settings) -> IO[str]:
    """Lock the data directory for this service's life; the kernel frees it however the process ends.

    Holding it is what makes HAProxy processes found in the data directory's run directory stale.

    Raises:
        StartFailed: another live service holds it.
    """
    lock = (settings.data_dir / ".service.lock").open("a")
    try:
        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise StartFailed(
            f"another hindsight service runs on {settings.data_dir}; stop it or use another data_dir"
        ) from None
    return lock


def _guard_haproxy(settings: Settings, http: HttpConfig) -> dict[str, str]:
    """Install the HAProxy guard of this data directory, end what a killed run left, return its env."""
    guard = HaproxyGuard.for_data_dir(settings.data_dir, http.stats_host)
    try:
        guard.install()
        reaped = guard.reap()
    except (UnsafeRunDir, TimeoutError) as exc:
        raise StartFailed(f"cannot prepare HAProxy's run directory: {exc}") from exc
    if reaped:
        logger.warning("ended %d HAProxy processes a stopped service had left on %s", len(reaped), settings.data_dir)
    return guard.env()


def _check_port(http: HttpConfig, serving: int | None) -> bool:
    """Whether Serve still has to start on ``http.port``; raises :class:`PortInUse` if it cannot.

    ``serving`` is the port this Ray instance's Serve listens on, if it runs. Without this check
    Serve would keep retrying to bind a port a stale process holds, and a start on a second port
    would silently be served on the first.
    """
    if serving is not None:
        if serving != http.port:
            raise PortInUse(
                f"Serve in this Ray instance already listens on port {serving} and keeps it until "
                f"serve.shutdown(); it cannot serve port {http.port}"
            )
        return False
    if port_taken(http.host, http.port):
        holders = ", ".join(f"pid {h.pid} ({h.name})" for h in port_holders(http.port))
        raise PortInUse(
            f"{http.host}:{http.port} is already in use by another process"
            f"{f' ({holders})' if holders else ' (of another user?)'}; stop it or choose another port"
        )
    return True


def wait_healthy(url: str, timeout_s: float) -> None:
    """Poll ``url/health`` until it answers 200.

    Raises:
        StartFailed: no 200 within ``timeout_s``; the message has the last answer.
    """
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    with httpx.Client(timeout=5.0) as http:
        while True:
            try:
                response = http.get(f"{url}/health")
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    return
                last = f"{response.status_code} {response.text[:200]}"
            if time.monotonic() >= deadline:
                raise StartFailed(f"{url}/health did not answer 200 in {timeout_s:.0f}s; last: {last}")
            time.sleep(0.1)


def serve_pool_metrics(directory: Path, host: str, port: int) -> ThreadingHTTPServer:
    """Answer ``GET /metrics`` on ``host:port`` with what the pool's workers on this host counted.

    For ``hindsight workers`` beside an MCP endpoint elsewhere: their counts are in metric files
    in ``directory`` (see :func:`cluster.metrics.reset_metrics_dir`), which no replica reads.
    Serves from a daemon thread until ``shutdown()``.
    """
    from prometheus_client import CONTENT_TYPE_LATEST

    metrics = Metrics(shared=directory)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404)
                return
            body = metrics.render()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            # Prometheus scrapes every few seconds; its requests are not worth a log line each.
            return

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="pool-metrics", daemon=True).start()
    logger.info("attribution pool metrics at http://%s:%d/metrics", host, port)
    return server
