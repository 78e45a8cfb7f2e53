"""Ports, listeners and the guard around Serve's HAProxy, without Ray."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from cluster.net import HaproxyGuard, UnsafeRunDir, free_port, harden_haproxy_config, is_loopback, port_holders
from cluster.net import port_taken as taken

# The shape of Serve's generated config around the lines the guard changes.
SERVE_CONFIG = """global
    log /run/x/log.sock local0 info
    stats socket /run/x/node/admin.sock mode 666 level admin expose-fd listeners
    stats timeout 30s
defaults
    mode http
frontend prometheus
    bind :9101
    mode http
frontend http_frontend
    bind *:8000
backend b
    server s1 127.0.0.1:30000 check
listen stats
  bind *:8404
  stats enable
"""


def test_the_side_listeners_move_to_the_stats_host_and_the_admin_socket_becomes_private() -> None:
    hardened = harden_haproxy_config(SERVE_CONFIG, "127.0.0.1")
    assert "    bind 127.0.0.1:9101\n" in hardened
    assert "  bind 127.0.0.1:8404\n" in hardened
    assert "stats socket /run/x/node/admin.sock mode 600 level admin expose-fd listeners" in hardened
    # The HTTP frontend keeps the address Serve gave it (http.host), here every interface.
    assert "    bind *:8000\n" in hardened
    assert "server s1 127.0.0.1:30000 check" in hardened


def test_an_ipv6_stats_host_is_bracketed() -> None:
    assert "bind [::1]:9101" in harden_haproxy_config(SERVE_CONFIG, "::1")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        *[("127.0.0.1", True), ("127.3.0.1", True), ("::1", True), ("::ffff:127.0.0.1", True), ("localhost", True)],
        *[("0.0.0.0", False), ("::", False), ("192.0.2.2", False), ("example.org", False)],
    ],
)
def test_loopback_addresses_are_recognised(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_the_holder_of_a_port_is_named() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert taken("127.0.0.1", port)
        assert os.getpid() in [holder.pid for holder in port_holders(port)]
    assert not taken("127.0.0.1", port)


def test_a_run_dir_open_to_others_is_refused(tmp_path: Path) -> None:
    guard = HaproxyGuard(tmp_path / "run", "127.0.0.1", "/bin/false")
    guard.run_dir.mkdir(mode=0o755)
    guard.run_dir.chmod(0o755)
    with pytest.raises(UnsafeRunDir, match="mode 755"):
        guard.install()


def test_a_free_port_is_outside_the_range_the_os_hands_out_meanwhile() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(20_000 <= p < low for p in ports), sorted(ports)
    assert len(ports) > 1  # drawn at random: two starts on one machine rarely meet
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports.pop()))  # and really free


def test_the_run_dir_is_short_enough_for_haproxy_socket_paths(tmp_path: Path) -> None:
    guard = HaproxyGuard.for_data_dir(tmp_path / ("a" * 50), "127.0.0.1", base=tmp_path)
    # 97 bytes is HAProxy's limit for "<run_dir>/<56-char node id>/metrics.sock".
    assert len(f"{guard.run_dir}/{'n' * 56}/metrics.sock") <= 97
    assert guard == HaproxyGuard.for_data_dir(tmp_path / ("a" * 50), "127.0.0.1", base=tmp_path)


def test_an_haproxy_left_in_the_run_dir_is_ended_and_its_port_freed(tmp_path: Path) -> None:
    guard = HaproxyGuard.for_data_dir(tmp_path, "127.0.0.1", base=tmp_path)
    guard.install()
    port = free_port()
    node = guard.run_dir / "node"
    node.mkdir()
    config = node / "haproxy.cfg"
    config.write_text(
        "global\n"
        f"    stats socket {node}/admin.sock mode 600 level admin\n"
        "defaults\n    mode http\n    timeout connect 1s\n    timeout client 1s\n    timeout server 1s\n"
        f"frontend f\n    bind 127.0.0.1:{port}\n    http-request return status 200\n"
    )
    # As a killed run leaves it: its own session, nobody's child that would stop it.
    stale = subprocess.Popen([guard.real_binary, "-db", "-f", str(config)], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not taken("127.0.0.1", port):
            assert stale.poll() is None, "the stand-in for a stale HAProxy exited"
            assert time.monotonic() < deadline, "the stand-in for a stale HAProxy did not listen"
            with contextlib.suppress(subprocess.TimeoutExpired):
                stale.wait(0.05)
        assert guard.processes() == [stale.pid]
        assert guard.reap() == [stale.pid]
        assert guard.processes() == []
        assert not taken("127.0.0.1", port)
    finally:
        stale.kill()
        stale.wait()
        shutil.rmtree(guard.run_dir)
