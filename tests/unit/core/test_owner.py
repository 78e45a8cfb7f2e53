"""The one owner check: what a store can hold and a filter can name, nothing else."""

import pytest

from cluster.core.errors import InvalidInput
from cluster.core.owner import MAX_OWNER_CHARS, check_owner


@pytest.mark.parametrize("owner", ["alice", "team/ops@example.com", "Zoë 张", "a" * MAX_OWNER_CHARS])
def test_a_printable_owner_passes_unchanged(owner: str) -> None:
    assert check_owner(owner) == owner


@pytest.mark.parametrize(
    "owner",
    ["", "a" * (MAX_OWNER_CHARS + 1), "nul\x00byte", "del\x7f", "line\nbreak", "tab\there", "\x1f"],
)
def test_an_empty_long_or_control_character_owner_is_refused(owner: str) -> None:
    with pytest.raises(InvalidInput, match="owner"):
        check_owner(owner)


@pytest.mark.parametrize("owner", [None, 7, b"alice", ["alice"]])
def test_an_owner_that_is_not_a_string_is_refused(owner: object) -> None:
    with pytest.raises(InvalidInput, match="owner"):
        check_owner(owner)
