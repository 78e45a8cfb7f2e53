"""Layered long-term memory: SQL records, Milvus vectors, hybrid retrieval, delayed promotion."""

from cluster.memory.cache import QueryCache
from cluster.memory.factory import build_memory_service
from cluster.memory.service import MemoryService, MemoryStats
from cluster.memory.vectors import MilvusMemoryIndex

__all__ = ["MemoryService", "MemoryStats", "MilvusMemoryIndex", "QueryCache", "build_memory_service"]
