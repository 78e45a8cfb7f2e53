"""Procedural-memory benchmark: seeded tool-use environments, scripted agents, and a harness that
compares no memory, raw-trajectory replay and hindsight over the three-round story.

Run it with :func:`bench.procedural.harness.run_bench` and print it with
:func:`bench.procedural.report.print_report`.
"""
