"""The service on a multi-node Ray cluster: replicas and attribution on different nodes, a node lost under load.

tests/e2e/multinode_cluster.py runs the cluster in a process of its own (this session's Ray is one
local node shared by every Ray test); Postgres and the session's Milvus server are behind it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.runner import LOOPBACK_ONLY_ENV
from cluster.storage.milvus import open_milvus
from tests.milvus_server import emptied_after

pytestmark = [pytest.mark.multinode, pytest.mark.milvus_server, pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 240


@pytest.fixture
def report(postgres_emptied_after: str, milvus_server_uri: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    client = open_milvus(milvus_server_uri, dedicated=True)
    # Ray's unix sockets live under its temp dir, and a socket path may not exceed 107 bytes.
    ray_dir = tempfile.mkdtemp(prefix="ray-mn-", dir="/tmp")
    try:
        with emptied_after(client):
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tests.e2e.multinode_cluster",
                    postgres_emptied_after,
                    milvus_server_uri,
                    str(tmp_path / "data"),
                ],
                cwd=ROOT,
                # Ray's switch for single-host clusters: every node on the loopback address (cluster/runner.py).
                env={**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": ray_dir, LOOPBACK_ONLY_ENV: "0"},
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT_S,
                check=False,
            )
            assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
            yield json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        client.close()
        shutil.rmtree(ray_dir, ignore_errors=True)


def test_the_loop_runs_across_nodes_and_a_lost_node_loses_no_acknowledged_write(report: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(report) + "\n")  # shown when it fails: what each node did
    # One replica on each serve node, the attribution worker on its own node.
    assert report["placement"] == {"replicas": ["serve-1", "serve-2"], "workers": ["attribution"]}
    assert report["trajectories"] == 6  # recorded, finalized, learned and served (checked in the run)
    # One scrape of the endpoint counts what the replicas of both nodes and the worker counted.
    counted = report["metrics_before"]
    assert (counted["memory_writes"], counted["finalized"]) == (6, 6)
    assert counted["analysed"] >= 6
    # Agents kept writing while a replica's node went away: every acknowledged write is stored.
    assert report["acknowledged_before_removal"] > 0
    assert report["acknowledged"] > report["acknowledged_before_removal"], "no write succeeded after the removal"
    assert report["lost"] == []
    assert report["placement_after"]["replicas"] == ["serve-1"]
    assert report["metrics_after"]["memory_writes"] >= 6 + report["acknowledged"]
