"""Procedural-memory benchmark: seeded tool-use environments, scripted agents, and a harness that
compares no memory, raw-trajectory replay, a naive rule learner and hindsight over the three-round
story, per family against an oracle, and on families held out from every agent choice.

Run it with :func:`bench.procedural.harness.run_bench` and print it with
:func:`bench.procedural.report.print_report`.
"""
