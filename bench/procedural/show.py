"""Print a saved procedural bench run: ``python -m bench.procedural.show RESULTS.json``."""

from __future__ import annotations

import sys
from pathlib import Path

from cluster.demo.harness import BenchResults
from cluster.demo.report import print_report


def main(argv: list[str] | None = None) -> int:
    """Print a saved results file."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.procedural.show RESULTS.json", file=sys.stderr)
        return 2
    print_report(BenchResults.model_validate_json(Path(args[0]).read_text(encoding="utf-8")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
