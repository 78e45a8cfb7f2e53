"""Where the console draws each node of a trajectory: sibling branches side by side, parents over their children."""

from __future__ import annotations

import uuid

from cluster.console.reads import layout
from tests.unit.engine.builders import INSERT_ACTIONS, Builder


def test_siblings_stand_side_by_side_under_their_parent() -> None:
    b = Builder()
    root = b.add("open_file")
    failed = b.add("add_item", INSERT_ACTIONS, parent=root, status="failure")
    b.add("verify", parent=failed, status="failure")
    worked = b.add("bulk_import", INSERT_ACTIONS, parent=root)
    last = b.add("verify", parent=worked)
    place = layout(b.build())
    assert place[failed] == (0.0, 1)
    assert place[worked] == (1.0, 1)
    assert place[root] == (0.5, 0)
    assert place[last] == (1.0, 2)


def test_a_node_whose_parent_was_never_recorded_is_drawn_as_a_root() -> None:
    b = Builder()
    root = b.add("open_file")
    stray = b.add("verify", parent=uuid.uuid4())
    place = layout(b.build())
    assert place[root] == (0.0, 0)
    assert place[stray] == (1.0, 0)
