"""Connections to Milvus: a Milvus Lite file (embedded default) or a Milvus server URI.

The ownership rule for Lite files
---------------------------------
A Lite ``.db`` file is served by exactly one ``milvus`` process, started by exactly one Python
process that holds the file's lock (``.<name>.lock`` beside it). Nobody else opens the file:

* The **owner** is the composition root of the deployment (the ``hindsight`` CLI, the Ray driver,
  a test fixture). It runs :class:`MilvusLiteServer`, which starts milvus-lite's engine on a unix
  socket only its user can reach (or a local TCP port) and writes the URI to ``.<name>.endpoint``
  beside the file.
* **Everyone else** (Ray actors, Serve replicas, notebooks, other processes on the host) connects by
  URI. :func:`open_milvus` does this by itself: given the ``.db`` path it reads the endpoint file,
  checks the owner is alive and connects to the served URI. Pass the URI itself
  (``HINDSIGHT_MILVUS_URI=unix:/tmp/hs-milvus-…/milvus.sock``) where the file is not visible.
* A process that finds no live server opens the file **in-process** (pymilvus starts a private engine
  on a unix socket and takes the lock). That is right for a single process (a notebook, the CLI, a
  test) and wrong for a fleet: the second process then fails with ``StoreUnavailable``, never with
  two engines on one file.

The engine watches the lock: when the owner releases it (``stop()``) or dies, the engine exits, so a
crashed owner leaves no orphaned engine. Data written before a ``kill -9`` survive.

A Milvus server (standalone or distributed) needs none of this: every process connects to its URI.

Replacing rows on a Lite engine
-------------------------------
Milvus Lite 2.5.1 replaces a row in two steps, a delete and then an insert, each under the engine's
lock on its own, and its ``Upsert`` call is the same two steps: a search served between them does
not find the row (measured: 106 of 401 searches racing one writer's upserts of 8 rows missed some).
An insert alone does not replace a key there: the old row stays and searches keep returning it.
A Milvus server writes both halves of an upsert under one timestamp and serves every read from one
timestamp, so a reader sees the old row or the new one. :class:`RowLock` gives a Lite engine the same
guarantee: every process that reads or replaces its rows takes a lock named after the engine.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import urlsplit

from pymilvus import MilvusClient

from cluster.core.errors import InvalidInput, StoreUnavailable
from cluster.net import free_port
from cluster.storage.files import private_file, write_private

logger = logging.getLogger(__name__)

SERVER_SCHEMES = ("http://", "https://", "tcp://", "unix:")
# milvus-lite's own rules for the file name (the engine refuses others).
_LITE_NAME = re.compile(r"^[A-Za-z0-9.\-_]{1,36}$")

# Servers this process owns, by resolved file path: a process never starts a second engine on a file.
_OWNED: dict[Path, MilvusLiteServer] = {}
_OWNED_LOCK = threading.Lock()
# TCP ports this process has served an engine on. gRPC shares a subchannel per address across a
# process's channels, and pymilvus keeps its shared connection to a URI after close(): one left in
# reconnect backoff by an engine that stopped fails a new engine's first call on the same port at once.
_SERVED_PORTS: set[int] = set()


@dataclass
class _Engine:
    """The engine a client of :func:`open_milvus` talks to: its name, and whether it is Lite (once known)."""

    name: str
    lite: bool | None


_ENGINES: weakref.WeakKeyDictionary[Any, _Engine] = weakref.WeakKeyDictionary()
_ENGINES_LOCK = threading.Lock()


def is_lite_target(target: str) -> bool:
    """A local Lite file rather than a server URI."""
    return not target.startswith(SERVER_SCHEMES)


def lite_path(target: str) -> Path:
    """Validate a Lite file target and return its absolute path.

    Raises:
        InvalidInput: the name is one milvus-lite refuses (must end in ``.db``, at most 36 characters
            of ``[A-Za-z0-9.-_]``) or the directory does not exist.
    """
    path = Path(target).expanduser().absolute()
    if path.suffix != ".db" or not _LITE_NAME.match(path.name):
        raise InvalidInput(f"Milvus Lite file name {path.name!r} must end in .db and be ≤36 chars of [A-Za-z0-9.-_]")
    if not path.parent.is_dir():
        raise InvalidInput(f"directory {path.parent} of the Milvus Lite file does not exist")
    return path


def endpoint_file(path: Path) -> Path:
    return path.parent / f".{path.name}.endpoint"


def lock_file(path: Path) -> Path:
    # The same name milvus-lite uses, so an in-process open elsewhere and a server here exclude each other.
    return path.parent / f".{path.name}.lock"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def served_uri(path: Path) -> str | None:
    """The URI a live :class:`MilvusLiteServer` serves ``path`` on, or ``None``."""
    with _OWNED_LOCK:
        owned = _OWNED.get(path)
    if owned is not None:
        return owned.uri
    try:
        info = json.loads(endpoint_file(path).read_text())
        uri, pid = str(info["uri"]), int(info["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if pid == os.getpid() or not _pid_alive(pid):
        return None  # left behind by a crashed owner
    return uri


def _engine_binary() -> Path:
    try:
        from milvus_lite.server import BIN_PATH
    except ImportError as exc:
        raise StoreUnavailable("milvus-lite is not installed") from exc
    binary = Path(BIN_PATH) / "milvus"
    if not binary.is_file():
        raise StoreUnavailable(f"milvus-lite engine not found at {binary}")
    return binary


class MilvusLiteServer:
    """Owns a Lite file and serves it to other processes by URI. Use as a context manager.

    Args:
        db_path: the ``.db`` file (created if absent).
        host: interface for TCP mode; keep it on loopback, the engine has no authentication.
        port: TCP port; ``0`` picks a free one.
        unix_socket: serve on a unix socket in a directory only this user may enter (the default:
            the engine has no authentication, and a TCP port, even on loopback, answers every local
            user); ``False`` serves on ``host:port`` for clients on other hosts.
        startup_timeout: seconds to wait for the engine to accept connections.
    """

    def __init__(
        self,
        db_path: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        unix_socket: bool = True,
        startup_timeout: float = 15.0,
    ) -> None:
        self.path = lite_path(str(db_path))
        self._host = host
        self._port = port
        self._unix_socket = unix_socket
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._lock_fd: IO[str] | None = None
        self._socket_path: Path | None = None
        self.uri = ""

    def __enter__(self) -> MilvusLiteServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> str:
        """Take the file's lock, start the engine and return the URI others connect to.

        Raises:
            StoreUnavailable: another process owns the file, or the engine did not come up.
        """
        if self._process is not None:
            return self.uri
        with _OWNED_LOCK:
            if self.path in _OWNED:
                raise StoreUnavailable(f"this process already serves {self.path} at {_OWNED[self.path].uri}")
            self._take_lock()
            try:
                self._launch()
            except BaseException:
                self._release()
                raise
            _OWNED[self.path] = self
        write_private(endpoint_file(self.path), json.dumps({"uri": self.uri, "pid": os.getpid()}))
        logger.info("Milvus Lite serving %s at %s", self.path, self.uri)
        return self.uri

    def stop(self) -> None:
        """Release the lock (the engine exits when it sees that) and wait for the engine to go."""
        with _OWNED_LOCK:
            if _OWNED.get(self.path) is self:
                del _OWNED[self.path]
        served = self.uri if self._process is not None else ""
        if self._process is not None:
            with contextlib.suppress(OSError):
                endpoint_file(self.path).unlink()
        self._release()
        if served:
            # The engine is gone, and its row lock with it: engines come and go on random ports.
            with contextlib.suppress(OSError):
                RowLock(engine_name(served)).discard()

    def _take_lock(self) -> None:
        fd = private_file(lock_file(self.path)).open("a")
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            fd.close()
            raise StoreUnavailable(
                f"{self.path} is owned by another process; connect to the URI it serves instead"
            ) from exc
        self._lock_fd = fd

    def _launch(self) -> None:
        binary = _engine_binary()
        # Made empty here, the engine takes it as a new database and keeps the mode.
        private_file(self.path)
        if self._unix_socket:
            # mkdtemp's directory is 0700: no other user can reach the socket (a path in the data
            # directory could pass the 107 bytes a socket path may have).
            self._socket_path = Path(tempfile.mkdtemp(prefix="hs-milvus-")) / "milvus.sock"
            address = f"unix:{self._socket_path}"
            self.uri = address
        else:
            port = self._port or _unserved_port(self._host)
            _SERVED_PORTS.add(port)
            address = f"{self._host}:{port}"
            self.uri = f"http://{address}"
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = f"{binary.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}"
        log_level = os.environ.get("LOG_LEVEL", "ERROR")
        # The last argument makes the engine watch our lock and exit when we release it or die.
        args = [str(binary), str(self.path), address, log_level, str(lock_file(self.path))]
        self._process = subprocess.Popen(args, env=env, cwd=str(self.path.parent))
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._startup_timeout
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise StoreUnavailable(f"milvus-lite engine for {self.path} exited with {self._process.returncode}")
            if self._accepts_connections():
                return
            time.sleep(0.02)
        raise StoreUnavailable(f"milvus-lite engine for {self.path} did not start in {self._startup_timeout}s")

    def _accepts_connections(self) -> bool:
        try:
            if self._socket_path is not None:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.connect(str(self._socket_path))
            else:
                host, port = self.uri.removeprefix("http://").rsplit(":", 1)
                socket.create_connection((host, int(port)), timeout=0.5).close()
        except OSError:
            return False
        return True

    def _release(self) -> None:
        if self._lock_fd is not None:
            # Closing the descriptor drops the POSIX lock; the engine notices and shuts down cleanly.
            self._lock_fd.close()
            self._lock_fd = None
        if self._process is not None:
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                logger.warning("milvus-lite engine for %s did not stop; killing it", self.path)
                self._process.kill()
                self._process.wait(timeout=5)
            self._process = None
        if self._socket_path is not None:
            with contextlib.suppress(OSError):
                self._socket_path.unlink()
                self._socket_path.parent.rmdir()
            self._socket_path = None


def _unserved_port(host: str) -> int:
    """A free port no engine of this process has used (the caller holds ``_OWNED_LOCK``)."""
    for _ in range(64):
        port = free_port(host)
        if port not in _SERVED_PORTS:
            return port
    raise StoreUnavailable(f"no free port on {host} that this process has not served Milvus on")


def open_milvus(
    target: str, token: str | None = None, *, timeout: float = 30.0, dedicated: bool = False
) -> MilvusClient:
    """A client for ``target``: a server URI, or a Lite file (served by its owner, else in-process).

    ``dedicated`` opens a connection of its own instead of pymilvus' shared one, for a caller that
    idles for minutes between calls (the shared one outlives ``close()`` and its keepalive pings
    can earn a GOAWAY from the server).

    Raises:
        InvalidInput: the Lite file name is not one milvus-lite accepts.
        StoreUnavailable: the server cannot be reached, or another process owns the Lite file
            without serving it.
    """
    uri = target
    if is_lite_target(target):
        path = lite_path(target)
        uri = served_uri(path) or str(path)
        if uri == str(path):
            # Opened in-process: pymilvus' engine would create these under the umask (0644).
            private_file(path)
            private_file(lock_file(path))
    # pymilvus pings every 10 s even with no call in flight; Milvus answers an idle client's pings
    # with a GOAWAY ("too_many_pings") and a log line in every process. A call in flight is still
    # pinged; an idle connection that broke is found by its next call, which gRPC retries.
    kwargs: dict[str, Any] = {
        "uri": uri,
        "timeout": timeout,
        "grpc_options": {"grpc.keepalive_permit_without_calls": False},
    }
    if dedicated:
        kwargs["dedicated"] = True
    if token and not uri.endswith(".db"):
        kwargs["token"] = token
    try:
        client = MilvusClient(**kwargs)
    except Exception as exc:  # pymilvus raises several unrelated types for "cannot connect"
        hint = (
            " (is another process holding the Lite file? run a MilvusLiteServer there)" if uri.endswith(".db") else ""
        )
        raise StoreUnavailable(f"cannot open Milvus at {uri}: {exc}{hint}") from exc
    with _ENGINES_LOCK:
        # A Lite file's engine is Lite, served or in-process; a URI's is asked when first needed.
        _ENGINES[client] = _Engine(engine_name(uri), lite=True if is_lite_target(target) else None)
    logger.debug("connected to Milvus at %s", uri)
    return client


def engine_name(uri: str) -> str:
    """One name per engine whichever way a process spells its address: the Lite file, socket or host and port."""
    if is_lite_target(uri):
        return str(Path(uri).expanduser().absolute())
    if uri.startswith("unix:"):
        return uri
    parts = urlsplit(uri)
    host = (parts.hostname or "").lower()
    if host in ("localhost", "::1"):
        host = "127.0.0.1"
    return f"{host}:{parts.port or 19530}"


def row_lock(client: Any, timeout: float) -> RowLock | None:
    """The lock the readers and writers of ``client``'s engine share, or ``None`` for a Milvus server.

    A server reports how it is deployed when a client connects; Milvus Lite 2.5.1 reports nothing,
    and so does any engine that is not a server: those get the lock.

    Raises:
        ValueError: the client talks to a Lite engine but was not made by :func:`open_milvus`, so
            there is no telling which lock the engine's other clients take.
        Exception: whatever pymilvus raises when the engine cannot be asked.
    """
    with _ENGINES_LOCK:
        engine = _ENGINES.get(client)
    lite = engine.lite if engine is not None else None
    if lite is None:
        info = client.get_server_version(detail=True, timeout=timeout)
        lite = not (isinstance(info, dict) and info.get("deploy_mode"))
        if engine is not None:
            engine.lite = lite
    if not lite:
        return None
    if engine is None:
        raise ValueError("a Milvus Lite client must come from open_milvus: its rows need the engine's RowLock")
    return RowLock(engine.name)


def _lock_dir() -> Path:
    # One place every process on the host agrees on whatever its TMPDIR: /dev/shm on Linux.
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    directory = base / f"hindsight-milvus-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory


class RowLock:
    """Readers and replacers of one Milvus Lite engine's rows, across the host's processes.

    A replace (delete, then insert) holds it exclusively; a read (search, query, count, one page of
    a scan) holds it shared. So no read runs between the two halves of a replace, and a row being
    rewritten is found, old or new. A writer waiting for it closes a gate that new readers pass
    through one at a time, so a stream of searches cannot keep a writer out. The locks are ``flock``
    locks on files named after the engine (:func:`engine_name`), in a directory of this user
    (``/dev/shm`` on Linux): the kernel drops a holder's lock when it exits, however it ends. Each
    hold opens its own descriptors, so threads of one process exclude each other too.

    Holders keep it for one Milvus call, itself bounded by the call's timeout; waiting has no limit
    of its own.

    Args:
        engine: the engine's name, as :func:`engine_name` gives it.
    """

    def __init__(self, engine: str) -> None:
        stem = hashlib.sha256(engine.encode()).hexdigest()[:32]
        directory = _lock_dir()
        self.rows_path = directory / f"{stem}.rows"
        self.gate_path = directory / f"{stem}.gate"

    def discard(self) -> None:
        """Remove the lock's files, once the engine has stopped (nobody can use its rows any more)."""
        for path in (self.rows_path, self.gate_path):
            path.unlink(missing_ok=True)

    def reading(self) -> contextlib.AbstractContextManager[None]:
        """Hold the lock shared: for one read."""
        return self._hold(fcntl.LOCK_SH)

    def writing(self) -> contextlib.AbstractContextManager[None]:
        """Hold the lock exclusively: for one replace."""
        return self._hold(fcntl.LOCK_EX)

    @contextlib.contextmanager
    def _hold(self, mode: int) -> Iterator[None]:
        rows = self._acquire(mode)
        try:
            yield
        finally:
            os.close(rows)  # releases the lock

    def _acquire(self, mode: int) -> int:
        """The rows lock's descriptor, locked in ``mode``, taken through the gate.

        Raises:
            StoreUnavailable: the lock files cannot be opened.
        """
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        try:
            rows = os.open(self.rows_path, flags, 0o600)
        except OSError as exc:
            raise StoreUnavailable(f"cannot open the Milvus Lite row lock {self.rows_path}: {exc}") from exc
        try:
            gate = os.open(self.gate_path, flags, 0o600)
            try:
                fcntl.flock(gate, fcntl.LOCK_EX)
                fcntl.flock(rows, mode)
            finally:
                os.close(gate)  # releases the gate
        except OSError as exc:
            os.close(rows)
            raise StoreUnavailable(f"cannot take the Milvus Lite row lock {self.rows_path}: {exc}") from exc
        return rows
