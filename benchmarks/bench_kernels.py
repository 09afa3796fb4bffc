"""What the fast kernels save: the reference's ``p`` and ``vjp`` against ``refattn.fast.kernels``.

    python benchmarks/bench_kernels.py            # (16, 256, 256) float64 scores, every activation
    python benchmarks/bench_kernels.py --json     # machine-readable
    python benchmarks/bench_kernels.py --out benchmarks/results/kernels-avx2.json   # also save the JSON
    python benchmarks/bench_kernels.py --quick    # tiny shape, one run: a smoke test

For every registered activation, on one array of scores of ``--shape``
(default: the score array of attention at (B, H, n) = (4, 4, 256)), it times

* ``forward``: the reference :meth:`refattn.core.activations.Activation.forward`
  (``ell`` by its stable formula, the shifted exponential, times ``rho``)
  against :func:`refattn.fast.kernels.forward` (the split ``h = exp(f a) b``,
  in place, returning ``p``, the weights and what the backward needs);
* ``vjp``: the reference :meth:`refattn.core.activations.Activation.backward`
  given the cache of the reference's forward (the scores and ``p``; it
  evaluates ``rho``, ``rho'`` and ``ell'`` from the scores, then Eq. 01.R4
  grouped as 01.R5), as the reference attention calls it, against
  :func:`refattn.fast.kernels.vjp_from` given the ``p`` and ``phi`` that the
  fast forward keeps (Eq. 01.R5 by the kernel's factors; ``overwrite_u=False``,
  so it allocates its output as the reference does);

and checks that each pair returns the same numbers (a timing of a wrong
result means nothing). ``derivations/20-speed.md`` section 2 quotes the ratios.

Timing, as in ``bench_cpu_attention.py``: each of ``--passes`` passes times every
candidate ``--repeats`` times in a row after a short pause and an untimed
warm-up, in this process's CPU time (every candidate runs on one thread, and
a machine busy with other work stretches wall-clock time, not CPU time); a
time is the median of all runs, a ratio the median over passes of
the ratio of the two medians in that pass.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time

import numpy as np

from bench_cpu_attention import cpu_name, median_ratio  # this folder's timing helpers
from refattn import ACTIVATIONS, activation
from refattn.fast import kernels
from refattn.fast.threads import single_threaded_blas

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402  (this folder's option checks)


def candidates(name, s, u):
    """``{key: callable}`` for one activation, and the largest relative difference of each pair."""
    act = activation(name)
    p, phi, aux = kernels.forward(act, s)  # (..., n) each; aux: what the fast cache holds
    cache = act.forward(s)[1]  # what the reference attention keeps for its backward pass
    fns = {
        "reference_forward": lambda: act(s),
        "fast_forward": lambda: kernels.forward(act, s)[1],
        "reference_vjp": lambda: act.backward(u, cache),
        "fast_vjp": lambda: kernels.vjp_from(act, np, aux, p, u, -1, phi),
    }
    diff = {}
    for what in ("forward", "vjp"):
        ref, fast = fns["reference_" + what](), fns["fast_" + what]()
        scale = max(float(np.max(np.abs(ref))), np.finfo(ref.dtype).tiny)
        diff[what] = float(np.max(np.abs(fast - ref))) / scale
    return fns, diff


def run_grouped(fns, passes, repeats, pause, warmup):
    """``{key: [[seconds per run] per pass]}``, every candidate ``repeats`` times in a row per pass."""
    times = {key: [] for key in fns}
    for _ in range(passes):
        for key, fn in fns.items():
            time.sleep(pause)
            t_end = time.perf_counter() + warmup
            fn()
            while time.perf_counter() < t_end:
                fn()
            runs = []
            for _ in range(repeats):
                t0 = time.process_time()
                fn()
                runs.append(time.process_time() - t0)
            times[key].append(runs)
    return times


def main(argv=None):
    ap = machine.parser(__doc__, whole=True)
    ap.add_argument("--shape", type=machine.positive_int, nargs="+", default=(16, 256, 256), help="scores' shape (default 16 256 256)")
    ap.add_argument("--repeats", type=machine.positive_int, default=10, help="runs per candidate and pass (default 10)")
    ap.add_argument("--passes", type=machine.positive_int, default=3, help="passes over all candidates (default 3)")
    ap.add_argument("--quick", action="store_true", help="(2, 8, 8), one pass of one run, no pauses: a smoke test")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--out", type=machine.output_file, help="also write the JSON to this file")
    args = ap.parse_args(argv)
    shape, repeats, passes, pause, warmup = tuple(args.shape), args.repeats, args.passes, 0.1, 0.1
    if args.quick:
        shape, repeats, passes, pause, warmup = (2, 8, 8), 1, 1, 0.0, 0.0
    rng = np.random.default_rng(0)
    s, u = rng.standard_normal(shape), rng.standard_normal(shape)  # scores and upstream gradient

    rows = {}
    for name in ACTIVATIONS:
        fns, diff = candidates(name, s, u)
        with single_threaded_blas():  # one thread, so that CPU time is the time of the work
            t = run_grouped(fns, passes, repeats, pause, warmup)
        med = {k: statistics.median(x for run in v for x in run) for k, v in t.items()}
        rows[name] = {
            "reference_forward_ms": 1e3 * med["reference_forward"], "fast_forward_ms": 1e3 * med["fast_forward"],
            "forward_ratio": median_ratio(t["reference_forward"], t["fast_forward"]),
            "reference_vjp_ms": 1e3 * med["reference_vjp"], "fast_vjp_ms": 1e3 * med["fast_vjp"],
            "vjp_ratio": median_ratio(t["reference_vjp"], t["fast_vjp"]),
            "max_rel_diff": diff,
        }
    result = {"shape": list(shape), "dtype": "float64", "repeats": repeats, "passes": passes,
              "timing": "CPU time of this process, median of passes x repeats runs; ratio = reference / fast, "
                        "median over passes",
              "rows": rows,
              "machine": {"python": platform.python_version(), "numpy": np.__version__,
                          "processor": platform.machine(), "cpu": cpu_name()}}
    if args.out:
        result["command"] = " ".join(["python benchmarks/bench_kernels.py"] + list(sys.argv[1:] if argv is None else argv))
        result["machine"] = machine.describe()
        machine.write_json(args.out, result)
    if args.json:
        print(json.dumps(result, indent=2))
        return result
    print(f"scores {shape} float64; median of {passes} passes x {repeats} runs; CPU {result['machine']['cpu']}")
    print(f"{'activation':11s} {'ref fwd ms':>10s} {'fast fwd ms':>11s} {'ratio':>6s} "
          f"{'ref vjp ms':>11s} {'fast vjp ms':>12s} {'ratio':>6s} {'max rel diff':>13s}")
    for name, r in rows.items():
        print(f"{name:11s} {r['reference_forward_ms']:10.2f} {r['fast_forward_ms']:11.2f} {r['forward_ratio']:6.2f} "
              f"{r['reference_vjp_ms']:11.2f} {r['fast_vjp_ms']:12.2f} {r['vjp_ratio']:6.2f} "
              f"{max(r['max_rel_diff'].values()):13.1e}")
    return result


if __name__ == "__main__":
    main()
