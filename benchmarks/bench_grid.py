"""How much faster a grid runs as Dask tasks: ``refattn nt-sensitivity`` serially and with ``--workers N``.

Each run is a fresh ``refattn nt-sensitivity`` command writing a results
file of its own; the serial run and the ``--workers`` runs take turns
(``--repeats`` rounds), so that a change of the machine's load falls on
both. Timed is the whole command, the local cluster's start and stop
included. For every run the script records the wall time, the sum of its
cells' own times (from the results file's ``ran_on``), the load average
before it, and checks that its cells equal the first serial run's (times
aside). The speed-up is the median serial time over the median time with
``--workers N``; the efficiency is the speed-up over N. The grid is Fig. 4's
(N2T5, 16 seeds) at 500 epochs over two initialisation scales and two
learning rates: 8 cells.

    python benchmarks/bench_grid.py --out benchmarks/results/grid.json
    python benchmarks/bench_grid.py --quick      # 4 small cells, one round, seconds

Needs the ``cluster`` extra (Dask). Not part of the test run; nothing here asserts a time.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402  (this folder's option checks)

#: The grid timed: Fig. 4's task and seeds, 500 epochs, 2 x 2 settings, both attentions.
GRID = ["fig4", "--seeds", "16", "--epochs", "500", "--eval-every", "50", "--init-scales", "0.5,1",
        "--lrs", "0.02,0.32"]
QUICK = ["fig4", "--seeds", "2", "--epochs", "40", "--eval-every", "20", "--n-test", "8", "--init-scales", "0.5,1",
         "--lrs", "0.32"]


def run(grid, results, workers):
    """One ``refattn nt-sensitivity`` command: its wall time, and the cells and ``ran_on`` it wrote."""
    argv = [sys.executable, "-m", "refattn", "nt-sensitivity", *grid, "--results", results, "--quiet", "--json"]
    if workers:
        argv += ["--workers", str(workers)]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": ROOT})
    wall = time.perf_counter() - t0
    with open(results, encoding="utf-8") as fh:
        doc = json.load(fh)
    cells = {k: {f: v for f, v in rec.items() if f != "seconds"} for k, rec in doc["cells"].items()}
    return {"workers": workers, "wall_seconds": round(wall, 2), "load_before": round(load, 2),
            "cell_seconds": round(sum(p["seconds"] for p in doc["ran_on"].values()), 1),
            "cells": len(cells)}, cells


def main(argv=None):
    ap = machine.parser(__doc__)
    ap.add_argument("--workers", type=machine.positive_int, default=2, help="local Dask workers (default 2)")
    ap.add_argument("--repeats", type=machine.positive_int, default=None,
                    help="rounds of one serial and one --workers run (default 2; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="4 small cells, for a look")
    ap.add_argument("--out", type=machine.output_file, help="write the results as JSON here")
    args = ap.parse_args(argv)
    grid = QUICK if args.quick else GRID
    repeats = args.repeats or (1 if args.quick else 2)
    rows, reference = [], None
    with tempfile.TemporaryDirectory(prefix="bench-grid-") as folder:
        for r in range(repeats):
            for workers in (0, args.workers):
                row, cells = run(grid, os.path.join(folder, f"{r}-{workers}.json"), workers)
                reference = cells if reference is None else reference
                row["identical_to_serial"] = cells == reference
                rows.append(row)
                print(f"{'serial' if not workers else f'--workers {workers}':>12}: {row['wall_seconds']:7.1f} s "
                      f"({row['cells']} cells, {row['cell_seconds']:.1f} s of cells; load before "
                      f"{row['load_before']:.2f}); cells identical to the serial run's: {row['identical_to_serial']}",
                      flush=True)
    serial = statistics.median(r["wall_seconds"] for r in rows if not r["workers"])
    parallel = statistics.median(r["wall_seconds"] for r in rows if r["workers"])
    speedup = serial / parallel
    print(f"speed-up of --workers {args.workers} over the serial run: {speedup:.2f} (median {serial:.1f} s against "
          f"{parallel:.1f} s; efficiency {speedup / args.workers:.2f})")
    result = {"command": "python benchmarks/bench_grid.py" + "".join(
                  f" {shlex.quote(a)}" for a in (argv if argv is not None else sys.argv[1:])),
              "grid": "refattn nt-sensitivity " + " ".join(grid), "workers": args.workers, "repeats": repeats,
              "rows": rows, "median_serial_seconds": serial, "median_workers_seconds": parallel,
              "speedup": round(speedup, 3), "efficiency": round(speedup / args.workers, 3),
              "all_identical": all(r["identical_to_serial"] for r in rows), "machine": machine.describe()}
    if args.out:
        machine.write_json(args.out, result)
    return 0 if result["all_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
