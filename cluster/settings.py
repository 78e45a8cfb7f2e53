"""All configuration in one validated object, read from ``HINDSIGHT_*`` environment variables.

Defaults are the embedded mode: a SQLite file and a Milvus Lite file under ``data_dir``, local Ray,
an offline embedding model. Build it once with :func:`load_settings` and pass it down.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cluster.experience.models import RoleLibraries
from cluster.experience.nearness import NEARNESS_DEFAULT
from cluster.memory.policy import ActivityPolicy, PromotionPolicy, RankingPolicy


class EmbeddingSettings(BaseModel):
    provider: Literal["onnx-minilm", "openai"] = Field(
        default="onnx-minilm", description="onnx-minilm runs offline in-process; openai calls an endpoint."
    )
    url: str | None = Field(default=None, description="Base URL of an OpenAI-compatible embeddings endpoint.")
    model: str = "all-MiniLM-L6-v2"
    api_key: SecretStr | None = None
    dimension: int = Field(default=384, ge=1)
    threads: int = Field(default=1, ge=1, description="Intra-op threads; one is fastest on a busy 2-core box.")
    quantized: bool = Field(
        default=True,
        description="onnx-minilm with int8 arithmetic (2-2.5x less CPU a text, cosine ~0.99 to fp32). "
        "Vectors change with it: reindex after switching.",
    )
    cache_dir: Path | None = Field(
        default=None, description="Where the int8 model derived at first use is kept; default ~/.cache/hindsight."
    )


class MemorySettings(BaseModel):
    """Long-term memory tuning; each policy documents its fields (cluster/memory/policy/).

    Environment variables nest with ``__``: ``HINDSIGHT_MEMORY__MAX_VALUE_BYTES=32768``.
    """

    index_type: Literal["FLAT", "IVF_FLAT"] = Field(
        default="FLAT", description="FLAT is exact; IVF_FLAT is faster at 100k+ but approximate."
    )
    max_value_bytes: int = Field(
        default=16 * 1024,
        ge=64,
        le=16 * 1024 * 1024,
        description="Largest memory value (UTF-8 bytes; a JSON value as compact JSON). See MemoryLimits.",
    )
    max_metadata_bytes: int = Field(default=4 * 1024, ge=64, le=16 * 1024 * 1024, description="Largest metadata.")
    max_context_bytes: int = Field(
        default=16 * 1024, ge=64, le=16 * 1024 * 1024, description="Largest context (searched, never returned)."
    )
    cache_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=0,
        description="Hot-query cache bound per process, in bytes of serialised results; 0 disables it.",
    )
    cache_ttl_seconds: float = Field(default=30.0, gt=0)
    access_flush_entries: int = Field(
        default=1000, ge=1, description="Write the accesses queries recorded once this many are waiting..."
    )
    access_flush_seconds: float = Field(default=10.0, gt=0, description="...or once the oldest is this old.")
    activity: ActivityPolicy = Field(default_factory=ActivityPolicy)
    ranking: RankingPolicy = Field(default_factory=RankingPolicy)
    promotion: PromotionPolicy = Field(default_factory=PromotionPolicy)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HINDSIGHT_", env_nested_delimiter="__", extra="forbid")

    data_dir: Path = Field(default=Path(".hindsight"), description="Where embedded-mode files live.")
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL; default sqlite:///<data_dir>/hindsight.db. "
        "Use postgresql+psycopg://user@host/db for Postgres.",
    )
    milvus_uri: str | None = Field(
        default=None, description="Milvus Lite file or server URI; default <data_dir>/milvus.db."
    )
    milvus_token: SecretStr | None = None
    ray_address: str | None = Field(default=None, description="Join this Ray cluster; default starts a local one.")

    max_trajectory_nodes: Annotated[int, Field(ge=1, le=100_000)] = 500
    max_context_bytes: Annotated[int, Field(ge=64, le=1_000_000)] = Field(
        default=2048,
        description="Largest context_snapshot of a recorded node, and of an experience query (compact JSON bytes).",
    )
    max_node_field_bytes: Annotated[int, Field(ge=64, le=16_000_000)] = Field(
        default=8192,
        description="Largest action_params, and execution_result, of a recorded node (compact JSON bytes).",
    )
    max_query_bytes: Annotated[int, Field(ge=64, le=1_000_000)] = Field(
        default=8192, description="Largest context text of an experience query (UTF-8 bytes)."
    )
    experience_top_k: Annotated[int, Field(ge=1, le=8)] = 5
    confidence_threshold: Annotated[float, Field(ge=0.0, le=1.0)] = 0.7
    value_nearness: Annotated[float, Field(gt=0.0, le=1.0)] | None = Field(
        default=NEARNESS_DEFAULT,
        description="Least cosine (service embedder) at which a text value of a query's situation that no "
        "learned condition names is read as the nearest value one does; unset: exact values only.",
    )
    experience_versions_kept: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=5, description="Experience library versions kept per owner (plus the active and previous one)."
    )
    analysis_batch_size: Annotated[int, Field(ge=1, le=10_000)] = Field(
        default=10,
        description="Trajectories per attribution batch, for every runtime: the live workers, stdio, "
        "hindsight workers and offline evaluation.",
    )
    scorer: str = Field(
        default="default",
        min_length=1,
        description="The registered attribution scorer every runtime learns with: the live workers, stdio, "
        "hindsight workers, reprocess and the consolidate job (actors.engine.credit). An unknown name is "
        "refused at start.",
    )
    scorer_modules: list[str] = Field(
        default_factory=list,
        description="Modules imported first in every process that attributes, where scorers of your own "
        'register themselves (actors.engine.register_scorer), e.g. ["my_scorers"]. One that cannot be '
        "imported is refused at start.",
    )
    shared_roles: dict[str, list[str]] = Field(
        default_factory=dict,
        description=(
            "Roles that learn into and are served from one library: library name -> roles, e.g. "
            '{"executor": ["executor-eu", "executor-us"]}. Unlisted roles keep their own library.'
        ),
    )

    auth_tokens: dict[str, str] = Field(
        default_factory=dict, description="Bearer token → owner. Empty means development mode: one local owner."
    )
    local_owner: str = Field(default="local", min_length=1, description="The owner in development mode and stdio.")

    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)

    @model_validator(mode="after")
    def _check_shared_roles(self) -> Settings:
        self.role_libraries()  # a role in two libraries is an error at start, not at the first query
        return self

    def role_libraries(self) -> RoleLibraries:
        return RoleLibraries(shared={name: tuple(roles) for name, roles in self.shared_roles.items()})

    def sql_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'hindsight.db'}"

    def milvus_target(self) -> str:
        return self.milvus_uri or str(self.data_dir / "milvus.db")


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment; keyword overrides win (handy in notebooks and tests)."""
    return Settings(**overrides)  # type: ignore[arg-type]
