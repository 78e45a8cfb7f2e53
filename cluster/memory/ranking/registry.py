"""The ranking stages of every memory query, in the order they run: the one place a stage is registered.

The searches' rankings and the expansion's come first, fusion sums them, and the stages after it
change the fused scores. Every runtime ranks through this list: the service's queries, the offline
tuning in ``bench/locomo/cv.py`` and the tests.
"""

from __future__ import annotations

from cluster.memory.ranking.stage import Stage
from cluster.memory.ranking.stages.coverage import Coverage
from cluster.memory.ranking.stages.entity import Entity
from cluster.memory.ranking.stages.expansion import Expansion
from cluster.memory.ranking.stages.fusion import Fusion
from cluster.memory.ranking.stages.recency import Recency
from cluster.memory.ranking.stages.role import Role
from cluster.memory.ranking.stages.session import Session
from cluster.memory.ranking.stages.sources import Dense, Lexical
from cluster.memory.ranking.stages.temporal import Temporal

STAGES: tuple[type[Stage], ...] = (
    Dense,
    Lexical,
    Expansion,
    Fusion,
    Entity,
    Temporal,
    Session,
    Role,
    Recency,
    Coverage,
)
