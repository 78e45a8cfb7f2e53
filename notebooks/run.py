"""Execute the notebook on the demo's data and save its plots: ``make notebook``.

It reads what `hindsight demo` wrote under ``<data_dir>/demo``; where the demo never ran (a fresh
checkout, CI) it first makes a small dataset of the same shape in this process
(:mod:`small_demo`), or always with ``--small``.

Usage: ``python notebooks/run.py [--plots docs/notebook] [--small] [--output executed.ipynb]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "attribution_playground.ipynb"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plots", type=Path, default=ROOT / "docs" / "notebook", help="where the plots go")
    parser.add_argument("--small", action="store_true", help="make a small demo dataset first, even if one exists")
    parser.add_argument("--output", type=Path, default=None, help="also write the executed notebook here")
    parser.add_argument("--timeout", type=int, default=600, help="seconds one cell may take")
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # data_dir is relative to the repository, as for `make demo`
    sys.path.insert(0, str(ROOT / "notebooks"))
    from cluster.settings import load_settings

    data_dir = load_settings().data_dir
    started = time.perf_counter()
    if args.small or not (data_dir / "demo" / "hindsight.db").exists():
        from small_demo import make_small_demo

        print(f"no demo data in {data_dir / 'demo'}: making a small one here (`make demo` makes the full one)")
        make_small_demo(data_dir)
        print(f"small demo data made in {time.perf_counter() - started:.0f} s")
    os.environ["HINDSIGHT_NOTEBOOK_PLOTS"] = str(args.plots.resolve())
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    executing = time.perf_counter()
    NotebookClient(
        notebook, timeout=args.timeout, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    ).execute()
    if args.output:
        nbformat.write(notebook, args.output)
    plots = sorted(p.name for p in args.plots.glob("*.png"))
    print(f"notebook executed in {time.perf_counter() - executing:.0f} s; plots in {args.plots}: {', '.join(plots)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
