from __future__ import annotations

from actors.engine import PathLabel, label_paths
from tests.unit.engine.builders import Builder


def test_each_leaf_path_is_labelled_from_its_leaf_and_the_final_one_from_the_outcome_too() -> None:
    b = Builder()
    root = b.add("plan", ["plan", "ask"])
    b.add("try_a", ["try_a", "try_b"], parent=root, status="failure")
    partial = b.add("try_b", ["try_a", "try_b"], parent=root, status="partial")
    b.add("finish", parent=partial, status="success")
    paths = label_paths(b.build("failure"))
    assert [p.label for p in paths] == [PathLabel.NEGATIVE, PathLabel.NEGATIVE]
    assert [p.final for p in paths] == [False, True]

    paths = label_paths(b.build("success"))
    assert [p.label for p in paths] == [PathLabel.NEGATIVE, PathLabel.POSITIVE]


def test_partial_leaf_or_partial_outcome_makes_a_partial_path() -> None:
    b = Builder()
    root = b.add("plan")
    b.add("write", parent=root, status="partial")
    assert [p.label for p in label_paths(b.build("success"))] == [PathLabel.PARTIAL]
    b2 = Builder()
    b2.add("plan")
    assert [p.label for p in label_paths(b2.build("partial"))] == [PathLabel.PARTIAL]


def test_an_intermediate_failure_that_recovered_does_not_change_the_path_label() -> None:
    b = Builder()
    root = b.add("fetch", status="failure")
    b.add("retry", parent=root)
    (path,) = label_paths(b.build(None))
    assert path.label is PathLabel.POSITIVE
    assert path.node_ids == (root, b.nodes[1].node_id)


def test_an_empty_trajectory_has_no_paths() -> None:
    assert label_paths(Builder().build("success")) == []
