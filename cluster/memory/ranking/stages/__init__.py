"""The ranking stages, one module each; :mod:`cluster.memory.ranking.registry` lists them in order.

A stage knows the stage interface (:mod:`cluster.memory.ranking.stage`), the candidates' facts and
the query's plan, never another stage (an import-linter contract checks it).
"""
