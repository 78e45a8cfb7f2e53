"""What building a service process sets for the whole process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
from pathlib import Path
from threadpoolctl import threadpool_info
from cluster.services import build_services
from cluster.settings import Settings

def blas_threads():
    return sorted({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"})

print(blas_threads())
services = build_services(Settings(data_dir=Path(sys.argv[1])))
print(blas_threads())
services.close()
"""


def test_a_service_process_runs_blas_on_one_thread(tmp_path: Path) -> None:
    # In a fresh process (this one's BLAS may be limited already): numpy's default is a thread a core.
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    assert out[-1] == "[1]", out
