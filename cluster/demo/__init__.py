"""The main job's task families, scripted agents and harness: ``hindsight demo`` (:mod:`cluster.demo.run`)
runs them against the embedded service; the benchmarks in ``bench/procedural`` run them too."""
