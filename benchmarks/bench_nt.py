"""Seconds per epoch of Expressive's NT training, now against the code of an earlier commit (issue 19, item 1).

Times ``refattn nt`` in Fig. 3's setting (N16T2, N_con = 32, expressive
attention, 16 seeds batched) as a user runs it, in one process per
measurement: the training time per epoch (evaluations left out) and the
time of one evaluation (``n_test`` = 100 series per seed, ``n_g`` = 50 greedy
steps). Three programs, in interleaved passes of one run so that the ratios
are measured under one load:

* ``baseline``: float64 with the code of ``--baseline`` (default
  ``0b5003d``, the commit on which issue 19 was filed), extracted with
  ``git archive`` into a temporary folder;
* ``float64`` and ``float32``: the code of this checkout.

Then checks that float32 changes no verdict where one can be read in a few
minutes: epochs to 100 % per seed and final accuracies, float64 against
float32, for N2T5 (Fig. 4; EA and DPA, 16 seeds, 200 epochs) and for N16T2
at N_con = 32 (Fig. 3; init x0.5, lr 0.32, where EA escapes the plateau
within a few hundred epochs; 16 seeds, 600 epochs).

    python benchmarks/bench_nt.py --out benchmarks/results/nt_epoch.json
    python benchmarks/bench_nt.py --quick          # a look in a few seconds

Needs ``git`` and this repository's history for the baseline. Not part of
the test run; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from refattn.studies.nt_training import run_nt  # noqa: E402
from refattn.training.runs import dumps  # noqa: E402

BASELINE = "0b5003d6411f294c6a98c84e9b7b678ca1810bf8"
PROGRAMS = ("baseline", "float64", "float32")

# one measurement: import refattn from the given folder (asserted), run the command line, print its JSON
CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
import refattn, refattn.cli
assert refattn.__file__.startswith(sys.argv[1]), refattn.__file__
sys.exit(refattn.cli.main(sys.argv[2:]))
"""


def measure(tree, task, n_con, seeds, epochs, dtype=None):
    """``refattn nt`` from ``tree``, one process: ``(train seconds per epoch, seconds of one evaluation)``."""
    argv = ["nt", "--task", task, "--context", str(n_con), "--attention", "expressive", "--seeds", str(seeds),
            "--epochs", str(epochs), "--eval-every", str(epochs), "--json"]
    if dtype is not None:
        argv += ["--dtype", dtype]
    done = subprocess.run([sys.executable, "-c", CHILD, tree] + argv, capture_output=True, text=True, check=True)
    r = json.loads(done.stdout)
    return r["train_seconds_per_epoch"], r["eval_seconds"]


def time_programs(baseline_tree, task, n_con, seeds, epochs, passes):
    """Per program and pass: training seconds per epoch and seconds of one evaluation; ratios of medians."""
    here = os.path.abspath(ROOT)
    runs = {"baseline": (baseline_tree, None), "float64": (here, "float64"), "float32": (here, "float32")}
    out = {p: {"train_seconds_per_epoch": [], "eval_seconds": []} for p in PROGRAMS}
    for _ in range(passes):
        for name in PROGRAMS:  # interleaved: all see the same load
            tree, dtype = runs[name]
            train, ev = measure(tree, task, n_con, seeds, epochs, dtype)
            out[name]["train_seconds_per_epoch"].append(train)
            out[name]["eval_seconds"].append(ev)
    for name in PROGRAMS:
        for key in ("train_seconds_per_epoch", "eval_seconds"):
            out[name][key + "_median"] = statistics.median(out[name][key])
    speedup = {name: {key: out["baseline"][key + "_median"] / out[name][key + "_median"]
                      for key in ("train_seconds_per_epoch", "eval_seconds")} for name in ("float64", "float32")}
    return out, speedup


def verdicts(setting):
    """EA against DPA in float64 and float32: epochs to 100 % per seed and final accuracies."""
    rows = {}
    for dt in ("float64", "float32"):
        for att in ("expressive", "softmax"):
            r = run_nt(setting["task"], setting["n_con"], att, seeds=setting["seeds"], epochs=setting["epochs"],
                       eval_every=setting["eval_every"], lr=setting["lr"], init_scale=setting["init_scale"],
                       progress=False, dtype=dt)
            reached = [e for e in r["epochs_to_100"] if e is not None]
            rows[f"{att}/{dt}"] = {"epochs_to_100": r["epochs_to_100"], "reached": len(reached),
                                   "median_epochs_to_100": statistics.median(reached) if reached else None,
                                   "final_accuracy": r["final_accuracy"]}
    same = {att: rows[f"{att}/float64"]["epochs_to_100"] == rows[f"{att}/float32"]["epochs_to_100"]
            for att in ("expressive", "softmax")}
    gap = {att: float(np.max(np.abs(np.subtract(rows[f"{att}/float64"]["final_accuracy"],
                                                rows[f"{att}/float32"]["final_accuracy"]))))
           for att in ("expressive", "softmax")}
    return {"setting": setting, "rows": rows, "epochs_to_100_identical": same,
            "largest_final_accuracy_difference": gap}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, for a look")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--baseline", default=BASELINE, help="the commit to compare with (default: %(default).7s)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args(argv)
    if args.quick:
        timing = dict(task="N16T2", n_con=8, seeds=2, epochs=3, passes=1)
        checks = [dict(task="N2T5", n_con=16, seeds=2, epochs=20, eval_every=10, lr=0.02, init_scale=1.0)]
    else:
        timing = dict(task="N16T2", n_con=32, seeds=16, epochs=30, passes=args.passes)
        checks = [dict(task="N2T5", n_con=16, seeds=16, epochs=200, eval_every=10, lr=0.02, init_scale=1.0),
                  dict(task="N16T2", n_con=32, seeds=16, epochs=600, eval_every=50, lr=0.32, init_scale=0.5)]
    t0 = time.perf_counter()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", args.baseline], capture_output=True, text=True,
                            check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(["git", "-C", ROOT, "archive", commit, "refattn"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
        times, speedup = time_programs(tree, **timing)
    result = {
        "command": "python benchmarks/bench_nt.py" + (" --quick" if args.quick else "")
                   + (f" --baseline {args.baseline}" if args.baseline != BASELINE else "")
                   + (f" --out {args.out}" if args.out else ""),
        "baseline_commit": commit,
        "timing_setting": timing, "times": times, "speedup_over_baseline": speedup,
        "verdicts": [verdicts(c) for c in checks],
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
