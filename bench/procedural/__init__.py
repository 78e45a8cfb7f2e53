"""Procedural-memory benchmarks: the demo's eleven hand-written families (:mod:`cluster.demo`) run in
this process (:mod:`bench.procedural.run_local`), and seeded random families of rule shapes nobody
wrote (:mod:`bench.procedural.generated`, run by :mod:`bench.procedural.generated_run`).

:mod:`bench.procedural.families` makes an instance of either kind by name.
"""
