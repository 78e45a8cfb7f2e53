"""ExecutionResult accepts what agents send beyond status/summary/data, and keeps it in ``data``."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from actors.engine.model.trajectories import ExecutionResult, NodeIn, ResultStatus, TrajectoryHeader


def test_extra_keys_are_kept_in_data() -> None:
    result = ExecutionResult.model_validate(
        {"status": "failure", "message": "boom", "error": {"code": 7}, "steps": 3, "data": {"rows": 2}}
    )
    assert result.status is ResultStatus.FAILURE
    assert result.data == {"rows": 2, "message": "boom", "error": {"code": 7}, "steps": 3}
    assert result.model_dump()["data"] == result.data
    assert ExecutionResult.model_validate(result.model_dump()) == result  # one stored shape


def test_a_result_without_extras_is_unchanged() -> None:
    assert ExecutionResult.model_validate({"status": "success"}).data == {}
    assert ExecutionResult(status=ResultStatus.SUCCESS, summary="ok").summary == "ok"


def test_extras_with_null_data_still_land_in_data() -> None:
    assert ExecutionResult.model_validate({"status": "success", "data": None, "output": "x"}).data == {"output": "x"}


def test_a_key_sent_twice_with_different_values_is_an_error() -> None:
    with pytest.raises(ValidationError, match="sent twice"):
        ExecutionResult.model_validate({"status": "success", "steps": 3, "data": {"steps": 4}})
    same = ExecutionResult.model_validate({"status": "success", "steps": 3, "data": {"steps": 3}})
    assert same.data == {"steps": 3}


@pytest.mark.parametrize("bad", ["a\x00b", math.nan, math.inf, {"deep": ["x\x00"]}])
def test_nul_bytes_and_nan_in_extra_keys_are_still_rejected(bad: object) -> None:
    with pytest.raises(ValidationError):
        ExecutionResult.model_validate({"status": "success", "output": bad})


def test_a_non_object_data_is_still_rejected() -> None:
    with pytest.raises(ValidationError):
        ExecutionResult.model_validate({"status": "success", "data": [1, 2], "output": "x"})
    with pytest.raises(ValidationError):
        ExecutionResult.model_validate({"status": "nope", "output": "x"})


def test_the_schema_welcomes_extra_keys() -> None:
    assert ExecutionResult.model_json_schema()["additionalProperties"] is True


def test_a_node_with_a_free_form_result_keeps_one_payload_hash() -> None:
    sent = {
        "available_actions": ["a", "b"],
        "chosen_action": "a",
        "execution_result": {"status": "success", "steps": 2},
    }
    node = NodeIn.model_validate(sent)
    again = NodeIn.model_validate({**sent, "node_id": str(node.node_id)})
    assert node.execution_result.data == {"steps": 2}
    assert again.payload_hash() == node.payload_hash()
    stored = NodeIn.model_validate(node.model_dump(mode="json"))
    assert stored.payload_hash() == node.payload_hash()


def test_a_timestamp_past_year_9999_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        NodeIn.model_validate(
            {
                "available_actions": ["a", "b"],
                "chosen_action": "a",
                "execution_result": {"status": "success"},
                "timestamp": 2**63,
            }
        )
    assert caught.value.errors()[0]["loc"] == ("timestamp",)
    assert "253402300799999" in str(caught.value)


@pytest.mark.parametrize("bad", ["", "x" * 201, "run\x00one"])
def test_a_bad_run_id_is_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(ValidationError) as caught:
        TrajectoryHeader(agent_id="a", task="t", run_id=bad)
    assert caught.value.errors()[0]["loc"] == ("run_id",)


def test_a_header_without_a_run_id_has_none() -> None:
    assert TrajectoryHeader(agent_id="a", task="t").run_id is None
