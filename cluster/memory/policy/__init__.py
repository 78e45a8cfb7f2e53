"""Layered long-term memory: the pure policy, one module per rule set.

What a memory is (``scope``, ``lifetime``, ``versions``), how large it may be (``limits``), how its
activity decays and when it is archived (``activity``), how a query's candidates are ranked
(``ranking``, the constants of :mod:`cluster.memory.ranking`), which raw interactions get promoted to
long-term memory (``promotion``) and what a state change is about (``state_change``); ``words`` is
how these rules read text and metadata keys. Every write decision here is a rule, never a model: the
same input always gives the same decision.

Nothing in this package touches a store; ``cluster.memory`` runs these rules against SQL and Milvus.
The names below are the ones the rest of the service and its callers use.
"""

from cluster.memory.policy.activity import ActivityPolicy
from cluster.memory.policy.lifetime import (
    MAX_TTL_SECONDS,
    Ttl,
    TtlKind,
    Validity,
    is_valid_at,
    validity_for,
    was_current_at,
)
from cluster.memory.policy.limits import MemoryLimits
from cluster.memory.policy.promotion import (
    LoggedTurn,
    LogStatus,
    Promotion,
    PromotionPolicy,
    PromotionReason,
    find_promotions,
    promotion_target,
    spoken,
    turn_log_id,
    write_trigger,
)
from cluster.memory.policy.ranking import RankingPolicy, rrf
from cluster.memory.policy.scope import MemoryScope, ScopeKind
from cluster.memory.policy.state_change import state_key
from cluster.memory.policy.versions import MemoryState, MemoryValue, SourceId, next_version
from cluster.memory.policy.words import STOPWORDS, described, key_forms, keyed, snake_key, terms

__all__ = [
    "MAX_TTL_SECONDS",
    "STOPWORDS",
    "ActivityPolicy",
    "LogStatus",
    "LoggedTurn",
    "MemoryLimits",
    "MemoryScope",
    "MemoryState",
    "MemoryValue",
    "Promotion",
    "PromotionPolicy",
    "PromotionReason",
    "RankingPolicy",
    "ScopeKind",
    "SourceId",
    "Ttl",
    "TtlKind",
    "Validity",
    "described",
    "find_promotions",
    "is_valid_at",
    "key_forms",
    "keyed",
    "next_version",
    "promotion_target",
    "rrf",
    "snake_key",
    "spoken",
    "state_key",
    "terms",
    "turn_log_id",
    "validity_for",
    "was_current_at",
    "write_trigger",
]
