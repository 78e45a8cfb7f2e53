"""The import contract on private modules names every private module the installed MCP SDK has."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"
CONTRACT = "No private module of Ray or the MCP SDK"


def _private_modules(package: str) -> set[str]:
    """The outermost private modules and packages of ``package`` (a name part starting with one ``_``)."""
    spec = importlib.util.find_spec(package)
    assert spec is not None
    assert spec.origin is not None
    root = Path(spec.origin).parent
    found: set[str] = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        for depth, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                found.add(".".join(parts[: depth + 1]))
                break
    return found


def test_every_private_module_of_the_mcp_sdk_is_forbidden() -> None:
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["name"] == CONTRACT]
    forbidden = set(contract["forbidden_modules"])
    installed = _private_modules("mcp") | _private_modules("mcp_types")
    assert installed, "the walk found no private module: it no longer sees the SDK's files"
    assert installed <= forbidden, sorted(installed - forbidden)
    assert "ray.serve._private" in forbidden
