"""Build the memory service from settings (the composition root calls this once)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cluster.core.memory import ActivityPolicy, PromotionPolicy, RankingPolicy
from cluster.core.ports import Embedder
from cluster.embedding import build_embedder
from cluster.memory.service import MemoryService
from cluster.memory.vectors import COLLECTION, MilvusMemoryIndex
from cluster.settings import Settings
from cluster.stores.db import Database
from cluster.stores.milvus import connect


def build_memory_service(
    settings: Settings,
    *,
    database: Database | None = None,
    embedder: Embedder | None = None,
    milvus: Any = None,
    collection: str = COLLECTION,
    index_type: str | None = None,
    activity: ActivityPolicy | None = None,
    ranking: RankingPolicy | None = None,
    promotion: PromotionPolicy | None = None,
    cache_size: int | None = None,
    cache_ttl: timedelta | None = None,
) -> MemoryService:
    """A memory service on the configured SQL database, Milvus and embedder.

    Pass ``database``, ``embedder`` or ``milvus`` (a ``MilvusClient``) to share ones the caller
    already opened; a process must not open a Milvus Lite file twice. The SQL schema must be
    migrated (``cluster.stores.migrate.upgrade``). Policies default to the ones documented on
    :class:`ActivityPolicy`, :class:`RankingPolicy` and :class:`PromotionPolicy`; every tuning
    argument left out comes from ``settings.memory``.
    """
    tuning = settings.memory
    embedder = embedder or build_embedder(settings.embedding)
    index = MilvusMemoryIndex(
        milvus or connect(settings),
        dimension=embedder.dimension,
        collection=collection,
        index_type=index_type or tuning.index_type,
    )
    return MemoryService(
        database or Database(settings.sql_url()),
        embedder,
        index,
        activity=activity or tuning.activity,
        ranking=ranking or tuning.ranking,
        promotion=promotion or tuning.promotion,
        cache_size=tuning.cache_size if cache_size is None else cache_size,
        cache_ttl=cache_ttl or timedelta(seconds=tuning.cache_ttl_seconds),
    )
