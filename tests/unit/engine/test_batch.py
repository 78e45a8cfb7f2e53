"""attribute_batch pauses the cyclic garbage collector while it runs and leaves it as it found it."""

from __future__ import annotations

import gc

from actors.engine import attribute_batch
from tests.unit.engine.builders import bulk_vs_single_runs


def test_the_collector_is_back_on_after_a_batch_and_stays_off_when_the_caller_turned_it_off() -> None:
    was = gc.isenabled()
    try:
        gc.enable()
        assert attribute_batch(bulk_vs_single_runs())
        assert gc.isenabled()
        gc.disable()
        attribute_batch(bulk_vs_single_runs())
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
