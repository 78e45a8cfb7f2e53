"""Column types shared by every table: instants in UTC with their offsets honoured, string enums."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, insert, select

from cluster.storage.db import Database, StrEnumType, UtcDateTime

PLUS_14 = timezone(timedelta(hours=14))
MINUS_10 = timezone(timedelta(hours=-10))
NOON_UTC = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Colour(StrEnum):
    RED = "red"
    GREEN = "green"


@pytest.fixture
def table(database: Database) -> Iterator[Table]:
    # A metadata of its own: the ORM's metadata (and the migrated schema it must match) stays as it is.
    metadata = MetaData()
    t = Table(
        "column_type_probe",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("at", UtcDateTime),
        Column("colour", StrEnumType(Colour)),
    )
    metadata.create_all(database.engine)
    yield t
    metadata.drop_all(database.engine)


def test_instants_with_offsets_round_trip_as_aware_utc(database: Database, table: Table) -> None:
    east = NOON_UTC.astimezone(PLUS_14)  # 02:00 the next day, +14:00
    west = (NOON_UTC + timedelta(hours=1)).astimezone(MINUS_10)  # 03:00, -10:00
    with database.transaction() as session:
        session.execute(insert(table), [{"id": 1, "at": east}, {"id": 2, "at": west}, {"id": 3, "at": None}])
    with database.read() as session:
        rows = dict(session.execute(select(table.c.id, table.c.at)).all())
    assert rows[1] == NOON_UTC
    assert rows[2] == NOON_UTC + timedelta(hours=1)
    assert rows[3] is None
    for moment in (rows[1], rows[2]):
        assert moment is not None
        assert moment.utcoffset() == timedelta(0)


def test_comparisons_in_sql_honour_offsets(database: Database, table: Table) -> None:
    with database.transaction() as session:
        session.execute(insert(table), [{"id": 1, "at": NOON_UTC.astimezone(PLUS_14)}])
    # One minute after noon UTC, written as 02:01 (+14:00) and as 02:01 (-10:00) the day before.
    later_east = (NOON_UTC + timedelta(minutes=1)).astimezone(PLUS_14)
    later_west = (NOON_UTC + timedelta(minutes=1)).astimezone(MINUS_10)
    earlier_west = (NOON_UTC - timedelta(minutes=1)).astimezone(MINUS_10)
    with database.read() as session:
        assert session.scalars(select(table.c.id).where(table.c.at < later_east)).all() == [1]
        assert session.scalars(select(table.c.id).where(table.c.at < later_west)).all() == [1]
        assert session.scalars(select(table.c.id).where(table.c.at < earlier_west)).all() == []


def test_a_naive_instant_is_taken_as_utc(database: Database, table: Table) -> None:
    with database.transaction() as session:
        session.execute(insert(table), [{"id": 1, "at": NOON_UTC.replace(tzinfo=None)}])
    with database.read() as session:
        assert session.scalar(select(table.c.at)) == NOON_UTC


def test_string_enums_round_trip_as_members(database: Database, table: Table) -> None:
    with database.transaction() as session:
        session.execute(insert(table), [{"id": 1, "colour": Colour.GREEN}, {"id": 2, "colour": "red"}])
    with database.read() as session:
        colours = dict(session.execute(select(table.c.id, table.c.colour)).all())
        assert session.scalars(select(table.c.id).where(table.c.colour == Colour.RED)).all() == [2]
    assert colours == {1: Colour.GREEN, 2: Colour.RED}
    assert isinstance(colours[1], Colour)
