"""Seconds per epoch of Expressive's NT training, float64 against float32 (issue 19, item 1).

Times :func:`refattn.experiments.nt_training.run_nt` in Fig. 3's setting
(N16T2, N_con = 32, 16 seeds batched): the training time per epoch
(evaluations left out) and the time of one evaluation (``n_test`` = 100
series per seed, ``n_g`` = 50 greedy steps), float64 and float32 in
interleaved passes of one run, so the ratio is measured under one load. Then
checks that float32 changes no verdict where one can be read quickly: N2T5
(Fig. 4), expressive (EA) against softmax (DPA), 16 seeds, both dtypes, the
epochs each seed needs to reach 100 % and the final accuracies.

    python benchmarks/bench_nt.py --out benchmarks/results/nt_epoch.json
    python benchmarks/bench_nt.py --quick          # a look in a few seconds

Not part of the test run; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from refattn.experiments.nt_training import run_nt  # noqa: E402
from refattn.runs import dumps  # noqa: E402

DTYPES = ("float64", "float32")


def time_epochs(task, n_con, seeds, epochs, passes):
    """Per dtype and pass: training seconds per epoch and seconds of one evaluation."""
    out = {dt: {"train_seconds_per_epoch": [], "eval_seconds": []} for dt in DTYPES}
    for _ in range(passes):
        for dt in DTYPES:  # interleaved: both see the same load
            r = run_nt(task, n_con, "expressive", seeds=seeds, epochs=epochs, eval_every=epochs,
                       progress=False, dtype=dt)
            out[dt]["train_seconds_per_epoch"].append(r["train_seconds_per_epoch"])
            out[dt]["eval_seconds"].append(r["eval_seconds"])
    for dt in DTYPES:
        for key in ("train_seconds_per_epoch", "eval_seconds"):
            out[dt][key + "_median"] = statistics.median(out[dt][key])
    ratio = {key: out["float64"][key + "_median"] / out["float32"][key + "_median"]
             for key in ("train_seconds_per_epoch", "eval_seconds")}
    return out, ratio


def verdicts(seeds, epochs):
    """N2T5, EA against DPA, both dtypes: epochs to 100 % per seed and final accuracies."""
    rows = {}
    for dt in DTYPES:
        for att in ("expressive", "softmax"):
            r = run_nt("N2T5", 16, att, seeds=seeds, epochs=epochs, eval_every=10, progress=False, dtype=dt)
            reached = [e for e in r["epochs_to_100"] if e is not None]
            rows[f"{att}/{dt}"] = {"epochs_to_100": r["epochs_to_100"], "reached": len(reached),
                                   "median_epochs_to_100": statistics.median(reached) if reached else None,
                                   "final_accuracy": r["final_accuracy"]}
    same = {att: rows[f"{att}/float64"]["epochs_to_100"] == rows[f"{att}/float32"]["epochs_to_100"]
            for att in ("expressive", "softmax")}
    return rows, same


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, for a look")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args(argv)
    if args.quick:
        timing = dict(task="N16T2", n_con=8, seeds=2, epochs=3, passes=1)
        check = dict(seeds=2, epochs=20)
    else:
        timing = dict(task="N16T2", n_con=32, seeds=16, epochs=30, passes=args.passes)
        check = dict(seeds=16, epochs=200)
    t0 = time.perf_counter()
    times, ratio = time_epochs(**timing)
    rows, same = verdicts(**check)
    result = {
        "command": "python benchmarks/bench_nt.py" + (" --quick" if args.quick else "")
                   + (f" --out {args.out}" if args.out else ""),
        "timing_setting": timing, "times": times, "float64_over_float32": ratio,
        "verdict_setting": {"task": "N2T5", "n_con": 16, **check, "eval_every": 10},
        "verdicts": rows, "epochs_to_100_identical": same,
        "machine": {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
                    "load_average_at_end": list(os.getloadavg())},
        "seconds": time.perf_counter() - t0,
    }
    text = dumps(result)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
