"""In-process mode for one local agent: the MCP tools over stdio, attribution on a background thread.

No Ray here on purpose: a local agent should not pay Ray's start-up time and memory; the analysis
code is the same :class:`~cluster.analysis.AnalysisService` the Ray workers run.
"""

from __future__ import annotations

import logging
import threading

from cluster.analysis import AnalysisService
from cluster.auth import OwnerResolver
from cluster.services import analysis_for, build_services
from cluster.settings import Settings
from cluster.tools import build_server

logger = logging.getLogger(__name__)


class BackgroundAnalysis:
    """Drains the analysis queue on a daemon thread until stopped."""

    def __init__(self, analysis: AnalysisService, poll_interval_s: float = 0.2) -> None:
        self._analysis = analysis
        self._poll = poll_interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hindsight-analysis", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                report = self._analysis.run_once()
            except Exception:
                logger.exception("attribution batch failed")
                self._stop.wait(self._poll * 10)
                continue
            if report.trajectories == 0:
                self._stop.wait(self._poll)


def run_stdio(settings: Settings) -> None:
    services = build_services(settings)
    background = BackgroundAnalysis(analysis_for(services))
    background.start()
    try:
        build_server(services, OwnerResolver({}, settings.local_owner)).run("stdio")
    finally:
        background.stop()
        services.close()
