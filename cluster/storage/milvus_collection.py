"""One Milvus collection shared by many owners: the single adapter every vector index is a view over.

What it guarantees, whichever index uses it:

* **Schema from a typed field list** (:class:`CollectionSpec`): a primary key, an ``owner`` field,
  scalar filter fields and one float vector. :meth:`MilvusCollection.ensure` creates and loads it.
* **Owner on every read.** :meth:`search`, :meth:`query`, :meth:`ids` and :meth:`count` take the
  owner first and always filter on it. Deletes go by primary key alone (below): every index's keys
  are SQL primary keys, unique across owners, and its callers pass only keys read under the owner.
* **One filter-literal policy.** Filters are built here only, from typed arguments: strings go
  through :func:`literal` (quotes and backslashes escaped, control characters refused, because
  Milvus' expression parser has no escape for them), integers through ``int``. :meth:`upsert`
  applies the same check to every string field, so nothing enters the collection that a filter
  could not name.
* **Upsert only, and a replaced row never missing.** Milvus Lite overwrites nothing on ``insert``
  (the old row stays, and searches keep returning it) and a Milvus server keeps both rows, so
  there is no ``insert`` of a known key here. :meth:`upsert` is Milvus' own ``upsert``: a server
  writes its delete and insert under one timestamp and reads from one timestamp, so every read sees
  the old row or the new one. Milvus Lite 2.5.1 runs the same call as a delete and then an insert,
  and a search between them misses the row (a template whose confidence was being updated went
  missing from an answer), so on a Lite engine a replace holds its engine's
  :class:`~cluster.storage.milvus.RowLock` exclusively and every read holds it shared. Deleting and
  then inserting, as this adapter did before, left the row missing in between on both.
* **Deletes by primary key, never by a filter, and never decided by a read.** On Lite 2.5.1 a
  query that filters on keys (``owner == … and key in […]``) misses most rows right after many were
  replaced, and a delete by filter runs such a query inside, so keys it missed keep their old row
  beside the new one. Measured (``bench/milvus_deletes.py``, docs/benchmarks.md "Reindex"):
  re-upserting 100,000 rows of four owners with a filtered delete, or with a strong-consistency
  filtered query choosing the keys to delete, left one owner with 3,232 of its 25,000 keys findable
  and two with thousands of keys twice; deleting every key of the batch by primary key left each key
  exactly once.
* **Timeouts on every call**, and every backend failure raised as ``StoreUnavailable``.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from cluster.core.errors import InvalidInput, StoreUnavailable
from cluster.storage.milvus import RowLock, row_lock

logger = logging.getLogger(__name__)

IndexType = Literal["FLAT", "IVF_FLAT", "AUTOINDEX", "HNSW"]
Scalar = str | int | float
Key = str | int

# Milvus refuses a search limit above this (topk) and a query window above 16384 rows.
MAX_LIMIT = 16_384


class Kind(StrEnum):
    """Scalar field types the adapter maps to Milvus ``DataType``s."""

    INT64 = "int64"
    VARCHAR = "varchar"
    FLOAT = "float"


@dataclass(frozen=True)
class ScalarField:
    """One scalar column. ``max_length`` (bytes, VARCHAR only) is enforced by a Milvus server, not by Lite."""

    name: str
    kind: Kind
    max_length: int = 0

    def __post_init__(self) -> None:
        if self.kind is Kind.VARCHAR and self.max_length <= 0:
            raise ValueError(f"VARCHAR field {self.name!r} needs a max_length")


@dataclass(frozen=True)
class CollectionSpec:
    """The shape of a collection: primary key, owner, scalar filter fields and the vector.

    Args:
        name: collection name.
        primary: the primary key (INT64 or VARCHAR), supplied by the caller (no auto id).
        dimension: vector length; must match the embedder.
        scalars: filter fields besides the owner.
        index_type: ``FLAT`` is exact (Lite 2.5 searches 100k rows in ~10-25 ms); the others approximate.
        nlist: IVF clusters; ``nprobe`` of them are searched per query.
        owner_length: bytes an owner may take (200 characters of UTF-8).
    """

    name: str
    primary: ScalarField
    dimension: int
    scalars: tuple[ScalarField, ...] = ()
    index_type: IndexType = "FLAT"
    nlist: int = 256
    nprobe: int = 32
    owner_length: int = 800
    fields: dict[str, ScalarField] = field(init=False, repr=False, compare=False)

    OWNER = "owner"
    VECTOR = "vector"

    def __post_init__(self) -> None:
        if self.primary.kind is Kind.FLOAT:
            raise ValueError("the primary key must be INT64 or VARCHAR")
        every = (self.primary, ScalarField(self.OWNER, Kind.VARCHAR, self.owner_length), *self.scalars)
        names = [f.name for f in every]
        if len(set(names)) != len(names) or self.VECTOR in names:
            raise ValueError(f"field names must be unique and not {self.VECTOR!r}: {names}")
        object.__setattr__(self, "fields", {f.name: f for f in every})


def literal(value: str, what: str = "value") -> str:
    """A Milvus expression string literal for ``value``.

    Milvus Lite 2.5 has no filter templating, so values are spliced in: backslash and double quote
    are escaped. Control characters are refused, since the parser unescapes none of ``\\n``,
    ``\\t``, ``\\x..`` or ``\\u....`` (measured on Lite 2.5.1): a value holding one could never be
    matched by any filter.

    Raises:
        InvalidInput: ``value`` holds a control character (U+0000-U+001F or U+007F).
    """
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidInput(f"control characters are not allowed in {what}")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class MilvusCollection:
    """A collection of many owners' vectors, each call constrained by owner (see the module docstring).

    Args:
        client: a connected ``pymilvus.MilvusClient`` (see ``cluster.storage.milvus.open_milvus``);
            the caller owns and closes it.
        spec: the collection's shape.
        timeout: seconds for each call; pymilvus retries failures with back-off inside it.
    """

    def __init__(self, client: Any, spec: CollectionSpec, *, timeout: float = 10.0) -> None:
        self.client = client
        self.spec = spec
        self.timeout = timeout
        self._ready = False
        self._lock: RowLock | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    # ---------------------------------------------------------------------------------- lifecycle

    def ready(self) -> bool:
        """For health checks: the server answers and the collection exists."""
        try:
            return bool(self.client.has_collection(self.name, timeout=self.timeout))
        except Exception:  # any failure means "not ready"; the caller reports it
            return False

    def ensure(self) -> None:
        """Create the collection if it does not exist, and load it. Idempotent; cheap after the first call.

        Raises:
            StoreUnavailable: Milvus cannot be reached or refused the schema.
        """
        if self._ready:
            return
        if not self._call("has_collection", self.client.has_collection, self.name):
            self._create()
        self._call("load_collection", self.client.load_collection, self.name)
        self._lock = self._call("connect", row_lock, self.client)
        self._ready = True

    def stored_dimension(self) -> int | None:
        """The vector length the collection was created with (``None`` if it does not exist yet)."""
        if not self._call("has_collection", self.client.has_collection, self.name):
            return None
        described = self._call("describe_collection", self.client.describe_collection, self.name)
        for f in described.get("fields", []):
            if f.get("name") == self.spec.VECTOR:
                return int(f.get("params", {}).get("dim", 0))
        return None

    def drop(self) -> None:
        """Remove the whole collection, every owner's rows (only for a full rebuild)."""
        self._ready = False
        if self._call("has_collection", self.client.has_collection, self.name):
            self._call("drop_collection", self.client.drop_collection, self.name)

    def reset(self) -> None:
        """Drop and recreate the collection empty."""
        self.drop()
        self.ensure()

    def _create(self) -> None:
        from pymilvus import DataType

        types = {Kind.INT64: DataType.INT64, Kind.VARCHAR: DataType.VARCHAR, Kind.FLOAT: DataType.FLOAT}
        spec = self.spec
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        for f in spec.fields.values():
            extra: dict[str, Any] = {"max_length": f.max_length} if f.kind is Kind.VARCHAR else {}
            schema.add_field(f.name, types[f.kind], is_primary=f is spec.primary, **extra)
        schema.add_field(spec.VECTOR, DataType.FLOAT_VECTOR, dim=spec.dimension)
        params = self.client.prepare_index_params()
        index_params: dict[str, Any] = {}
        if spec.index_type == "IVF_FLAT":
            index_params = {"nlist": spec.nlist}
        elif spec.index_type == "HNSW":
            index_params = {"M": 16, "efConstruction": 200}
        params.add_index(field_name=spec.VECTOR, index_type=spec.index_type, metric_type="IP", params=index_params)
        self._call("create_collection", self.client.create_collection, self.name, schema=schema, index_params=params)
        logger.info("created Milvus collection %s (%s, IP, %s-d)", self.name, spec.index_type, spec.dimension)

    # ------------------------------------------------------------------------------------- writes

    def upsert(self, rows: Sequence[Mapping[str, Any]], batch_size: int = 2000, *, fresh: bool = False) -> None:
        """Write rows (every field of the spec plus ``vector``); a row with a known key replaces it.

        Each batch is one ``upsert``: a reader finds each of its rows, as it was or as written,
        never neither (see the module docstring).

        ``fresh``: the caller knows no row with these keys was ever written (e.g. keys from a
        sequence, written right after they were drawn), so the rows are inserted: on Lite the
        delete inside an upsert costs as much as the insert.

        Raises:
            InvalidInput: a string field holds a control character, or a field is missing or unknown.
            StoreUnavailable: Milvus failed.
        """
        if not rows:
            return
        self.ensure()
        data = [self._row(r) for r in rows]
        for start in range(0, len(data), batch_size):
            batch = data[start : start + batch_size]
            if fresh:
                self._call("upsert", self.client.insert, self.name, batch)
                continue
            with self._writing():
                self._call("upsert", self.client.upsert, self.name, batch)

    def _row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        spec = self.spec
        expected = {*spec.fields, spec.VECTOR}
        if set(row) != expected:
            raise InvalidInput(f"a row of {self.name} needs exactly the fields {sorted(expected)}, got {sorted(row)}")
        out: dict[str, Any] = {}
        for name, f in spec.fields.items():
            value = row[name]
            if f.kind is Kind.VARCHAR:
                literal(str(value), name)  # the same check a filter on it would make
                out[name] = str(value)
            elif f.kind is Kind.INT64:
                out[name] = int(value)
            else:
                out[name] = float(value)
        vector = [float(x) for x in row[spec.VECTOR]]
        if len(vector) != spec.dimension or not all(math.isfinite(x) for x in vector):
            raise InvalidInput(f"{self.name} holds finite {spec.dimension}-d vectors, got {len(vector)}-d")
        out[spec.VECTOR] = vector
        return out

    def delete(self, keys: Sequence[Key]) -> None:
        """Delete the rows with these primary keys, by key (see the module docstring for why not by owner)."""
        if not keys:
            return
        self.ensure()
        for start in range(0, len(keys), MAX_LIMIT):
            self._call("delete", self.client.delete, self.name, ids=list(keys[start : start + MAX_LIMIT]))

    # -------------------------------------------------------------------------------------- reads

    def search(
        self,
        owner: str,
        vector: Sequence[float],
        limit: int,
        *,
        equals: Mapping[str, Scalar] | None = None,
        any_of: Mapping[str, Sequence[Scalar]] | None = None,
        at_least: Mapping[str, float] | None = None,
        output_fields: Sequence[str] = (),
    ) -> list[tuple[Key, float, dict[str, Any]]]:
        """The owner's nearest rows, best first, as ``(primary key, inner product, output fields)``.

        Args:
            owner: every hit is this owner's.
            vector: the query vector (unit length: inner product is cosine).
            limit: at most this many hits (capped at Milvus' 16384).
            equals: ``field == value`` for each item.
            any_of: ``field in [values]`` for each item.
            at_least: ``field >= value`` for each item.
            output_fields: scalar fields to return with each hit.
        """
        self.ensure()
        params = {"nprobe": self.spec.nprobe} if self.spec.index_type == "IVF_FLAT" else {}
        where = self._where(owner, equals=equals, any_of=any_of, at_least=at_least)
        with self._reading():
            found = self._call(
                "search",
                self.client.search,
                self.name,
                data=[[float(x) for x in vector]],
                limit=max(1, min(limit, MAX_LIMIT)),
                filter=where,
                anns_field=self.spec.VECTOR,
                output_fields=list(output_fields),
                search_params={"metric_type": "IP", "params": params},
                # Writers are other processes: read every write they have had acknowledged.
                consistency_level="Strong",
            )
        hits = found[0]
        if not output_fields:
            # Keys and scores as the reply lists them: reading each hit's dict costs more than the search.
            return [(key, float(score), {}) for key, score in zip(hits.ids, hits.distances, strict=True)]
        return [(hit["id"], float(hit["distance"]), dict(hit.get("entity") or {})) for hit in hits]

    def query(
        self, owner: str, keys: Sequence[Key], output_fields: Sequence[str], *, with_vector: bool = False
    ) -> list[dict[str, Any]]:
        """The owner's rows with these primary keys (scalar fields, and the vector if asked)."""
        if not keys:
            return []
        self.ensure()
        fields = [*output_fields, self.spec.VECTOR] if with_vector else list(output_fields)
        rows: list[dict[str, Any]] = []
        for start in range(0, len(keys), MAX_LIMIT):
            where = self._where(owner, keys=keys[start : start + MAX_LIMIT])
            with self._reading():
                found = self._call(
                    "query",
                    self.client.query,
                    self.name,
                    filter=where,
                    output_fields=fields,
                    consistency_level="Strong",
                )
            rows.extend(dict(r) for r in found)
        return rows

    def ids(self, owner: str) -> set[Key]:
        """Every primary key the owner has (for rebuilds and consistency checks)."""
        return self._scan(self._where(owner), self.spec.primary.name)

    def owners(self) -> set[str]:
        """Every owner with a row (a full rebuild also visits owners SQL no longer has)."""
        return {str(owner) for owner in self._scan(f'{self.spec.OWNER} != ""', self.spec.OWNER)}

    def _scan(self, where: str, field: str) -> set[Any]:
        """The distinct values of ``field`` over the rows ``where`` selects, read in pages."""
        self.ensure()
        with self._reading():
            # A Milvus 2.3 server gives the iterator no snapshot time, and pymilvus then reads at a time of
            # its own that misses writes just acknowledged (a scan right after an upsert found nothing).
            # A strong-consistency read first waits until every acknowledged write is readable.
            self._call("query", self.client.query, self.name, filter=where, limit=1, consistency_level="Strong")
            iterator = self._call(
                "query", self.client.query_iterator, self.name, batch_size=1000, filter=where, output_fields=[field]
            )
        found: set[Any] = set()
        try:
            # A page at a time under the lock: a whole scan would keep writers out for as long as it runs.
            while True:
                with self._reading():
                    batch = iterator.next()  # the iterator carries the timeout it was made with
                if not batch:
                    break
                found.update(r[field] for r in batch)
        except Exception as exc:  # as in _call
            raise StoreUnavailable(f"Milvus query on {self.name} failed: {exc}") from exc
        finally:
            iterator.close()
        return found

    def count(self, owner: str) -> int:
        self.ensure()
        where = self._where(owner)
        with self._reading():
            rows = self._call(
                "count",
                self.client.query,
                self.name,
                filter=where,
                output_fields=["count(*)"],
                consistency_level="Strong",
            )
        return int(rows[0]["count(*)"]) if rows else 0

    # ----------------------------------------------------------------------------------- plumbing

    def _reading(self) -> contextlib.AbstractContextManager[None]:
        """Shared hold of a Lite engine's row lock for one read (nothing on a server: reads are snapshots)."""
        return self._lock.reading() if self._lock is not None else contextlib.nullcontext()

    def _writing(self) -> contextlib.AbstractContextManager[None]:
        """Exclusive hold of a Lite engine's row lock for one replace (nothing on a server: an upsert is atomic)."""
        return self._lock.writing() if self._lock is not None else contextlib.nullcontext()

    def _where(
        self,
        owner: str,
        *,
        keys: Sequence[Key] | None = None,
        equals: Mapping[str, Scalar] | None = None,
        any_of: Mapping[str, Sequence[Scalar]] | None = None,
        at_least: Mapping[str, float] | None = None,
    ) -> str:
        """The filter expression: the owner always, then the given conditions, every value a checked literal."""
        parts = [f"{self.spec.OWNER} == {literal(owner, 'owner')}"]
        if keys is not None:
            parts.append(f"{self.spec.primary.name} in [{', '.join(self._value(self.spec.primary, k) for k in keys)}]")
        for name, value in (equals or {}).items():
            parts.append(f"{name} == {self._value(self._field(name), value)}")
        for name, values in (any_of or {}).items():
            f = self._field(name)
            parts.append(f"{name} in [{', '.join(self._value(f, v) for v in values)}]")
        for name, bound in (at_least or {}).items():
            f = self._field(name)
            if f.kind is Kind.VARCHAR:
                raise ValueError(f"{name} is a string: no range filter")
            parts.append(f"{name} >= {self._value(f, bound)}")
        return " and ".join(parts)

    def _field(self, name: str) -> ScalarField:
        try:
            return self.spec.fields[name]
        except KeyError:
            raise ValueError(f"{self.name} has no field {name!r}") from None

    @staticmethod
    def _value(f: ScalarField, value: Scalar) -> str:
        if f.kind is Kind.VARCHAR:
            return literal(str(value), f.name)
        if f.kind is Kind.INT64:
            return str(int(value))
        number = float(value)
        if not math.isfinite(number):
            raise InvalidInput(f"{f.name} must be a finite number")
        return repr(number)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # pymilvus retries failed calls with back-off; the timeout bounds the whole attempt.
        kwargs.setdefault("timeout", self.timeout)
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # pymilvus raises MilvusException, gRPC and connection errors alike
            raise StoreUnavailable(f"Milvus {what} on {self.name} failed: {exc}") from exc
