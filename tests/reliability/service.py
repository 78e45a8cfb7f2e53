"""A real ``hindsight serve`` in a subprocess, and what it listens on.

Each process gets its own short ``RAY_TMPDIR`` (unix socket paths are limited) and a data
directory of the test, serves on a free loopback port and runs the code of this work tree.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import uvicorn
from starlette.types import ASGIApp

import cluster
from cluster.net import free_port

REPO = Path(cluster.__file__).resolve().parent.parent
READY_LINE = "hindsight is serving MCP"


@contextlib.contextmanager
def uvicorn_app(app: ASGIApp) -> Iterator[str]:
    """``app`` under uvicorn on a free loopback port, in a thread of this process; yields its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in deadline_loop(30, "uvicorn did not start"):
            if server.started:
                break
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def deadline_loop(timeout_s: float, what: str) -> Iterator[None]:
    """Yield until the caller breaks out; fail with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        yield
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} within {timeout_s:.0f}s")
        time.sleep(0.1)


@dataclass
class ServeProcess:
    """One ``hindsight serve`` started by a test; :meth:`cleanup` ends whatever of it is left."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path
    data_dir: Path
    ray_tmp: Path

    @classmethod
    def start(
        cls,
        data_dir: Path,
        port: int,
        ray_tmp: Path,
        *,
        workers: int = 1,
        maintenance: bool = False,
        lease_s: float | None = None,
    ) -> ServeProcess:
        """Start ``hindsight serve``; ``maintenance`` runs memory upkeep (its first pass at once),
        ``lease_s`` sets the attribution lease (default: the service's)."""
        config = data_dir.parent / f"serve-{port}.yaml"
        lease = f", lease_s: {lease_s}" if lease_s is not None else ""
        config.write_text(
            f"http: {{host: 127.0.0.1, port: {port}}}\n"
            "ingress: {num_replicas: 2}\n"
            f"attribution: {{workers: {workers}{lease}}}\n"
            f"maintenance: {{enabled: {str(maintenance).lower()}}}\n"
        )
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "RAY_AUTH_MODE": "disabled",
            "RAY_TMPDIR": str(ray_tmp),
            "HINDSIGHT_DATA_DIR": str(data_dir),
        }
        log = data_dir.parent / f"serve-{port}-{time.monotonic_ns()}.log"
        with log.open("wb") as out:
            # A session of its own: cleanup can end the whole group if a test fails half way.
            process = subprocess.Popen(
                [sys.executable, "-m", "cluster.cli", "serve", "--config", str(config)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return cls(process, port, log, data_dir, ray_tmp)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_serving(self, timeout_s: float = 240) -> None:
        for _ in deadline_loop(timeout_s, f"hindsight serve did not log {READY_LINE!r}"):
            if READY_LINE in self.output():
                return
            if self.process.poll() is not None:
                raise AssertionError(f"hindsight serve exited {self.process.returncode}:\n{self.output()[-3000:]}")

    def tree(self) -> list[psutil.Process]:
        """The serve process and every process it started (Ray's, the replicas', HAProxy)."""
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def haproxies(self) -> list[psutil.Process]:
        return [p for p in self.tree() if _name(p) == "haproxy"]

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 120) -> int:
        self.process.send_signal(sig)
        return self.process.wait(timeout_s)

    def belongs(self, process: psutil.Process) -> bool:
        """Whether ``process`` is part of this service: in its tree once, or pointing at its Ray
        folder or data directory (Ray's and Milvus Lite's command lines and environments do)."""
        marks = (str(self.ray_tmp), str(self.data_dir))
        try:
            if any(mark in arg for arg in process.cmdline() for mark in marks):
                return True
            env = process.environ()
        except psutil.Error:
            return False
        return env.get("RAY_TMPDIR") == marks[0] or env.get("HINDSIGHT_DATA_DIR") == marks[1]

    def members(self) -> list[psutil.Process]:
        """Every live process of this service: its tree, and whatever of it was reparented away."""
        found = {p.pid: p for p in self.tree()}
        me = os.getpid()
        for process in psutil.process_iter():
            if process.pid not in found and process.pid != me and self.belongs(process):
                found[process.pid] = process
        return [p for p in found.values() if _alive(p)]

    def kill_tree(self) -> list[str]:
        """``kill -9`` of the whole service at once, as a power cut or the OOM killer of its cgroup
        would: every process is first stopped (none can react or start another), then killed.
        Returns what was killed, a name each (a Python process's is its module or script); the
        serve process itself is reaped."""
        stopped: dict[int, str] = {}
        # The tree first (quick to list), then whatever else is the service's (a scan of every
        # process), again until none is new: one may have started while the others were stopped.
        for members in (self.tree, self.members, self.members, self.members):
            fresh = [p for p in members() if p.pid not in stopped]
            if not fresh:
                break
            for process in fresh:
                stopped[process.pid] = _label(process)
                with contextlib.suppress(psutil.Error):
                    process.send_signal(signal.SIGSTOP)
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(30)
        return list(stopped.values())

    def kill_mid_batch(self, batch_claimed: Callable[[], bool], timeout_s: float) -> tuple[list[str], int]:
        """:meth:`kill_tree` at a moment ``batch_claimed`` says yes while the service stands still.

        Each time ``batch_claimed`` first says yes, the tree is stopped (SIGSTOP, as
        :meth:`kill_tree` does first) and asked again: the stopped service shows what a kill would
        leave. If the batch is still claimed it is killed, else it carries on (SIGCONT) and the
        next claim is tried. Returns what was killed and how many tries it took.
        """
        tree = self.tree()
        deadline = time.monotonic() + timeout_s
        for tries in itertools.count(1):
            while not batch_claimed():  # polled often: a batch takes milliseconds
                if time.monotonic() > deadline:
                    raise AssertionError(f"the moment to kill did not come in {timeout_s:.0f}s ({tries - 1} tries)")
                time.sleep(0.005)
            signal_all(tree, signal.SIGSTOP)
            if batch_claimed():
                return self.kill_tree(), tries
            signal_all(tree, signal.SIGCONT)
        raise AssertionError("unreachable")

    def survivors(self) -> list[str]:
        """The processes of this service still alive, as "pid name" (zombies count as dead)."""
        return [f"{p.pid} {_name(p)}" for p in self.members()]

    def cleanup(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        # Whatever of it left the process group (nothing should; a failed test must not leak it).
        for process in self.members():
            with contextlib.suppress(psutil.Error):
                process.kill()


def signal_all(processes: list[psutil.Process], sig: signal.Signals) -> None:
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.send_signal(sig)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _label(process: psutil.Process) -> str:
    """``name``, or for a Python process the module or script it runs (``python -m cluster.cli``)."""
    name = _name(process)
    if not name.startswith("python"):
        return name
    name = "python"
    try:
        args = process.cmdline()[1:]
    except psutil.Error:
        return name
    args = [a for a in args if a not in ("-u", "-m")]
    return f"{name} {Path(args[0]).name if args else ''}".strip()


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return ""


@dataclass(frozen=True)
class Listener:
    pid: int
    process: str
    kind: str
    address: str


def listeners(processes: list[psutil.Process]) -> list[Listener]:
    """Every listening TCP socket, bound UDP socket and bound unix socket of ``processes``."""
    found: list[Listener] = []
    for process in processes:
        try:
            connections = process.net_connections(kind="all")
            name = process.name()
        except psutil.Error:
            continue  # It ended meanwhile: it listens on nothing.
        for conn in connections:
            if conn.family == socket.AF_UNIX:
                if conn.laddr:
                    found.append(Listener(process.pid, name, "unix", str(conn.laddr)))
            elif conn.type == socket.SOCK_STREAM and conn.status == psutil.CONN_LISTEN:
                found.append(Listener(process.pid, name, "tcp", f"{conn.laddr.ip}:{conn.laddr.port}"))
            elif conn.type == socket.SOCK_DGRAM and conn.laddr and conn.laddr.port:
                found.append(Listener(process.pid, name, "udp", f"{conn.laddr.ip}:{conn.laddr.port}"))
    return found


def on_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    ip = ipaddress.ip_address(host)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def unix_socket_is_private(path: str) -> bool:
    """Whether only this user can connect: the socket denies others write, or a folder on its
    path denies them search. An abstract socket (no file) has no permissions at all."""
    if not path or path[0] in ("\0", "@"):
        return False
    with contextlib.suppress(FileNotFoundError):
        # HAProxy binds "<name>.<pid>.tmp" and renames it, so the bound name may be gone.
        if not os.stat(path).st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return True
    folder = Path(path).parent
    while True:
        st = os.stat(folder)
        if st.st_uid == os.getuid() and not st.st_mode & (stat.S_IXGRP | stat.S_IXOTH):
            return True
        if folder.parent == folder:
            return False
        folder = folder.parent


def is_exposed(listener: Listener) -> bool:
    if listener.kind == "unix":
        return not unix_socket_is_private(listener.address)
    return not on_loopback(listener.address)


def anything_listens_on(port: int) -> list[str]:
    """Who listens on TCP ``port`` on any address, as "pid name" (empty: nobody)."""
    holders = []
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port:
            holders.append(f"{conn.pid} {_process_name(conn.pid)}")
    return holders


def _process_name(pid: int | None) -> str:
    if pid is None:
        return "?"
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return "?"


def health(url: str) -> int:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code
    except httpx.HTTPError:
        return 0


def short_tmp() -> Path:
    """A fresh short folder for Ray's session files (its socket paths must stay short)."""
    return Path(tempfile.mkdtemp(prefix="hsr", dir="/tmp"))
