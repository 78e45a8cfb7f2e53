"""No setting that does nothing (issue 48): ``llm`` was read by no code, so it is not a setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from cluster.settings import Settings


def test_an_llm_setting_is_refused_rather_than_ignored(tmp_path: Path) -> None:
    assert "llm" not in Settings.model_fields
    with pytest.raises(ValidationError, match="llm"):
        Settings(data_dir=tmp_path, llm={"url": "http://127.0.0.1:1/v1"})  # type: ignore[call-arg]
