"""Milliseconds per epoch of Expressive's NT training at steady state, against an earlier commit, per BLAS kernel.

Times ``refattn nt`` in Fig. 3's setting (N16T2, N_con = 32, expressive
attention, 16 seeds batched) as a user runs it, one process per
measurement, and records the end of every epoch (a callback added to the
trainer): the time per epoch is the median over the epochs after the first
``--skip`` (start-up, first allocations, caches) and before the last (the one
evaluation). Three programs, in interleaved passes so that the ratios are
measured under one load:

* ``baseline``: float64 with the code of ``--baseline`` (default
  ``0b5003d``, before the NT step was made faster), extracted with
  ``git archive`` into a temporary folder;
* ``float64`` and ``float32``: the code of this checkout.

Each kernel of ``--kernels`` runs every program in processes started with
``OPENBLAS_CORETYPE`` set to it (OpenBLAS reads it when it loads; the JSON
records the kernel each process reports, which can differ from the one
asked for where the CPU lacks it). Threads: as the command line runs them
(``REFATTN_NUM_THREADS`` unset: the usable cores, at most 8).

Then, unless ``--no-verdicts``, checks that float32 changes no verdict where
one can be read in a few minutes: epochs to 100 % per seed and final
accuracies, float64 against float32, for N2T5 (Fig. 4; EA and DPA, 16 seeds,
200 epochs) and for N16T2 at N_con = 32 (Fig. 3; init x0.5, lr 0.32, 16
seeds, 600 epochs).

    python benchmarks/bench_nt.py --out benchmarks/results/nt_epoch.json
    python benchmarks/bench_nt.py --quick          # a look in a few seconds

Needs ``git`` and this repository's history for the baseline. Not part of
the test run; nothing here asserts a time.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import machine  # noqa: E402
from refattn.studies.nt_training import Settings, run_nt  # noqa: E402

BASELINE = "0b5003d6411f294c6a98c84e9b7b678ca1810bf8"
PROGRAMS = ("baseline", "float64", "float32")

# one measurement: import refattn from the given folder (asserted), add a callback that records the end
# of every epoch to the trainer the NT study calls, run the command line, print the stamps as JSON
CHILD = """
import contextlib, importlib, io, json, os, sys, time
sys.path.insert(0, sys.argv[1])
import refattn, refattn.cli
assert refattn.__file__.startswith(sys.argv[1]), refattn.__file__
# the study module of this tree, found on disk (older commits have refattn/experiments/): an import that
# merely succeeds could come from another checkout through an editable install's finder
room = "studies" if os.path.exists(os.path.join(sys.argv[1], "refattn", "studies", "nt_training.py")) else "experiments"
study = importlib.import_module(f"refattn.{room}.nt_training")
assert study.__file__.startswith(sys.argv[1]), study.__file__
stamps, cpu, real = [], [], study.train
def stamp(epoch, params):
    stamps.append(time.perf_counter())
    cpu.append(time.process_time())
def timed(*args, **kwargs):
    kwargs["callbacks"] = list(kwargs.get("callbacks", ())) + [stamp]
    return real(*args, **kwargs)
study.train = timed
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = refattn.cli.main(sys.argv[2:])
from threadpoolctl import threadpool_info
blas = [i.get("architecture") for i in threadpool_info() if i.get("user_api") == "blas"]
print(json.dumps({"code": code, "stamps": stamps, "cpu_stamps": cpu, "blas_kernel": blas[0] if blas else None,
                  "eval_seconds": json.loads(out.getvalue())["eval_seconds"]}))
"""


def measure(tree, kernel, setting, dtype=None, cpu=False):
    """One ``refattn nt`` process from ``tree`` under ``OPENBLAS_CORETYPE=kernel``: per-epoch seconds
    (epochs 1 to E - 2: the last one evaluates), the evaluation's seconds, the kernel OpenBLAS reports;
    with ``cpu``, also the per-epoch CPU seconds of the process (all its threads)."""
    # --attention: the spelling every commit accepts (this one notes on stderr that --activation replaces it)
    argv = ["nt", "--task", setting["task"], "--context", str(setting["n_con"]), "--attention", "expressive",
            "--seeds", str(setting["seeds"]), "--epochs", str(setting["epochs"]),
            "--eval-every", str(setting["epochs"]), "--json"]
    if dtype is not None:
        argv += ["--dtype", dtype]
    env = dict(os.environ)
    if kernel is not None:
        env["OPENBLAS_CORETYPE"] = kernel
    done = subprocess.run([sys.executable, "-c", CHILD, tree] + argv, capture_output=True, text=True, check=True,
                          env=env)
    r = json.loads(done.stdout.strip().splitlines()[-1])
    per_epoch = np.diff(r["stamps"])[:-1]  # the last epoch ends with the evaluation
    if cpu:
        return per_epoch.tolist(), r["eval_seconds"], r["blas_kernel"], np.diff(r.get("cpu_stamps", []))[:-1].tolist()
    return per_epoch.tolist(), r["eval_seconds"], r["blas_kernel"]


def steady(per_epoch, skip):
    """The median and the 10th and 90th percentiles (ms) of the epochs after the first ``skip``."""
    x = 1e3 * np.asarray(per_epoch[skip:])
    return {"median_ms": float(np.median(x)), "p10_ms": float(np.percentile(x, 10)),
            "p90_ms": float(np.percentile(x, 90)), "epochs_timed": int(x.size)}


def time_programs(baseline_tree, kernel, setting, passes, skip):
    """Per program and pass: the steady-state epoch time; ratios of the baseline's to each program's."""
    here = os.path.abspath(ROOT)
    runs = {"baseline": (baseline_tree, None), "float64": (here, "float64"), "float32": (here, "float32")}
    out = {p: {"passes": [], "eval_seconds": []} for p in PROGRAMS}
    reported = set()
    for _ in range(passes):
        for name in PROGRAMS:  # interleaved: all see the same load
            tree, dtype = runs[name]
            per_epoch, ev, arch = measure(tree, kernel, setting, dtype)
            reported.add(arch)
            out[name]["passes"].append(steady(per_epoch, skip))
            out[name]["eval_seconds"].append(ev)
    for name in PROGRAMS:
        out[name]["median_ms"] = statistics.median(p["median_ms"] for p in out[name]["passes"])
    speedup = {}
    for name in ("float64", "float32"):
        per_pass = [b["median_ms"] / p["median_ms"] for b, p in zip(out["baseline"]["passes"], out[name]["passes"])]
        speedup[name] = {"ratio": statistics.median(per_pass), "spread": [min(per_pass), max(per_pass)],
                         "per_pass": per_pass}
    return {"kernel_asked": kernel, "kernel_reported": sorted(k for k in reported if k), "times": out,
            "speedup_over_baseline": speedup}


def verdicts(setting):
    """EA against DPA in float64 and float32: epochs to 100 % per seed and final accuracies."""
    rows = {}
    for dt in ("float64", "float32"):
        for att in ("expressive", "softmax"):
            r = run_nt(Settings(task=setting["task"], context=setting["n_con"], activation=att,
                                seeds=setting["seeds"], epochs=setting["epochs"], eval_every=setting["eval_every"],
                                lr=setting["lr"], init_scale=setting["init_scale"], dtype=dt), progress=False)
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


def table(result):
    """A Markdown table: per kernel, each program's steady-state ms per epoch and its speed-up."""
    lines = ["| BLAS kernel | program | ms per epoch (median of passes) | passes | speed-up over the baseline |",
             "|---|---|---:|---|---:|"]
    for k in result["kernels"]:
        kernel = ", ".join(k["kernel_reported"]) or str(k["kernel_asked"])
        for name in PROGRAMS:
            t = k["times"][name]
            s = k["speedup_over_baseline"].get(name)
            sp = "1" if s is None else f"{s['ratio']:.2f} ({s['spread'][0]:.2f}–{s['spread'][1]:.2f})"
            label = f"{result['baseline_commit'][:7]}, float64" if name == "baseline" else f"this code, {name}"
            lines.append(f"| {kernel} | {label} | {t['median_ms']:.1f} | "
                         + ", ".join(f"{p['median_ms']:.1f}" for p in t["passes"]) + f" | {sp} |")
    return "\n".join(lines)


def resolve(ap, baseline):
    """The full hash of the commit ``baseline`` names; one line and exit code 2 where it names none."""
    try:
        done = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", "--quiet", f"{baseline}^{{commit}}"],
                              capture_output=True, text=True, check=False)
    except OSError as exc:
        machine.fail(ap, "--baseline", "a commit of this repository (needs git)", f"{baseline} ({exc.strerror})")
    if done.returncode != 0 or not done.stdout.strip():
        machine.fail(ap, "--baseline", "a commit of this repository", baseline)
    return done.stdout.strip()


def timing_options(ap):
    """The options of an NT epoch timing, this script's and ``bench_nt_torch.py``'s: ``--quick``,
    ``--passes``, ``--epochs``, ``--skip`` and ``--kernels``, with their defaults."""
    ap.add_argument("--quick", action="store_true", help="tiny sizes, for a look")
    ap.add_argument("--passes", type=machine.positive_int, default=3)
    ap.add_argument("--epochs", type=machine.positive_int, default=300, help="epochs per measurement (default 300)")
    ap.add_argument("--skip", type=machine.non_negative_int, default=30,
                    help="first epochs left out of the median (default 30)")
    ap.add_argument("--kernels", nargs="+", default=["Haswell", "SkylakeX"],
                    help="OPENBLAS_CORETYPE values to run under (default Haswell SkylakeX)")


def main(argv=None):
    ap = machine.parser(__doc__)
    timing_options(ap)
    ap.add_argument("--baseline", default=BASELINE, help="the commit to compare with (default: %(default).7s)")
    ap.add_argument("--no-verdicts", action="store_true", help="skip the float64 / float32 verdict check")
    ap.add_argument("--out", type=machine.output_file, help="write the results as JSON here")
    args = ap.parse_args(argv)
    if args.quick:
        setting = dict(task="N16T2", n_con=8, seeds=2, epochs=6)
        passes, skip = 1, 1
        checks = [dict(task="N2T5", n_con=16, seeds=2, epochs=20, eval_every=10, lr=0.02, init_scale=1.0)]
    else:
        setting = dict(task="N16T2", n_con=32, seeds=16, epochs=args.epochs)
        passes, skip = args.passes, args.skip
        checks = [dict(task="N2T5", n_con=16, seeds=16, epochs=200, eval_every=10, lr=0.02, init_scale=1.0),
                  dict(task="N16T2", n_con=32, seeds=16, epochs=600, eval_every=50, lr=0.32, init_scale=0.5)]
    if setting["epochs"] < skip + 3:
        ap.error(f"--epochs: expected at least --skip + 3 = {skip + 3}, got {setting['epochs']}")
    commit = resolve(ap, args.baseline)
    t0 = time.perf_counter()
    result = {
        "command": " ".join(["python benchmarks/bench_nt.py"] + list(sys.argv[1:] if argv is None else argv)),
        "what": "refattn nt, training time per epoch at steady state: the median over epochs "
                f"{skip + 1}..{setting['epochs'] - 2} of one process (the last epoch evaluates), then the median over passes",
        "baseline_commit": commit, "timing_setting": dict(setting, passes=passes, skip=skip),
        "machine": machine.describe(), "kernels": [],
    }
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(["git", "-C", ROOT, "archive", commit, "refattn"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
        for kernel in args.kernels:
            result["kernels"].append(time_programs(tree, kernel, setting, passes, skip))
            print(table(result), file=sys.stderr, flush=True)
    if not args.no_verdicts:
        result["verdicts"] = [verdicts(c) for c in checks]
    result["machine"]["load_average_at_end"] = list(os.getloadavg())
    result["seconds"] = time.perf_counter() - t0
    if args.out:
        machine.write_json(args.out, result)
    print(table(result))


if __name__ == "__main__":
    main()
