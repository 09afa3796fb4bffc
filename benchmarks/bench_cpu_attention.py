"""Time attention forward + backward for every activation (float64, CPU).

    python benchmarks/bench_cpu_attention.py            # (B, H, n, d) = (4, 4, 256, 64)
    python benchmarks/bench_cpu_attention.py --json     # machine-readable
    python benchmarks/bench_cpu_attention.py --quick    # tiny shape, a smoke test
    python benchmarks/bench_cpu_attention.py --out results.json   # also save the JSON

For every registered activation with the scaled dot-product score it times

* ``refattn``: the fast path, :func:`refattn.fast.attention` then
  :func:`refattn.fast.attention_backward` (the hand-derived backward), as a
  user calls them: blocked and threaded (``refattn.fast.threads``);
* ``unblocked``: the same two calls with ``refattn.fast.set_blocking(False)``,
  the whole-batch code on one core (plus BLAS's own threads), to show what
  blocks and threads buy;
* ``reference``: the textbook reference, :func:`refattn.core.attention.attention`
  and its backward, to show what the fast path buys altogether;
* ``autograd``: the reference forward traced by autograd, then autograd's
  backward (``make_vjp``), i.e. the same forward differentiated automatically;

and, as the external reference, plain PyTorch eager softmax attention in
float64 with its autograd backward, on its default threads and on one
(PyTorch is a benchmark-only dependency; that row is skipped when it is not
installed).

Targets (the fast path's, as docs/performance.md states them): refattn softmax no slower than
PyTorch; every other activation within 1.5x of refattn softmax; the analytic
backward at least 1.5x faster than autograd's backward on the same forward.

Timing. A shared machine drifts by tens of percent within a minute, and a
candidate can slow the next one down: after a multi-threaded matrix product
OpenBLAS's worker threads spin for about 0.1 s before they sleep, and so do
PyTorch's OpenMP threads; and on a virtual machine the first runs after an
idle spell are up to twice as slow. So the candidates are timed in *groups*:
each of ``--passes`` passes times every candidate ``--repeats`` times in a
row, after a 0.2 s pause and 0.15 s of untimed warm-up runs. A candidate's time is the median over all
its runs; every ratio is the median over passes of the ratio of the two
candidates' medians in that pass, which cancels drift that affects both
sides of a ratio alike. The minimum over runs is recorded too.

How long it takes: ``--passes`` x candidates (two for PyTorch, six per
activation) x (the pause, the warm-up and ``--repeats`` runs), so at least
3 x 56 x 0.35 s = 59 s of pauses and warm-ups at the defaults, plus the runs,
which a machine busy with other work stretches. It prints its progress on
stderr, one line per pass, and records its wall-clock ``seconds`` and the load
average before and after.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time

import numpy as np
from autograd import make_vjp

from refattn import ACTIVATIONS
from refattn.core import attention as reference
from refattn.fast import attention, attention_backward, set_blocking, threads as parallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402  (this folder's option checks)


def refattn_candidates(name, Q, K, V, G):
    """Callables: forward + backward, backward alone (from one cache), both unblocked,
    and both on the reference."""

    def fwd_bwd():
        out, cache = attention(Q, K, V, activation=name)
        return attention_backward(G, cache)

    def unblocked():
        set_blocking(False)
        try:
            return fwd_bwd()
        finally:
            set_blocking(True)

    def textbook():
        out, cache = reference.attention(Q, K, V, activation=name)
        return reference.attention_backward(G, cache)

    _, cache = attention(Q, K, V, activation=name)
    return {"total": fwd_bwd, "backward": lambda: attention_backward(G, cache), "unblocked_total": unblocked,
            "reference_total": textbook}


def autograd_candidates(name, Q, K, V, G):
    def f(qkv):
        return reference.attention(*qkv, activation=name)[0]

    def fwd_bwd():
        vjp, _ = make_vjp(f)((Q, K, V))
        return vjp(G)

    vjp, _ = make_vjp(f)((Q, K, V))
    return {"total": fwd_bwd, "backward": lambda: vjp(G)}


def torch_candidates(Q, K, V, G):
    try:
        import torch
    except ImportError:
        return None, None
    q, k, v, g = (torch.from_numpy(x) for x in (Q, K, V, G))
    scale = 1.0 / np.sqrt(Q.shape[-1])
    threads = torch.get_num_threads()

    def fwd_bwd():
        qq, kk, vv = (t.detach().requires_grad_(True) for t in (q, k, v))
        w = torch.softmax((qq @ kk.transpose(-1, -2)) * scale, dim=-1)
        out = w @ vv
        out.backward(g)
        return qq.grad, kk.grad, vv.grad

    def one_thread():
        torch.set_num_threads(1)
        try:
            return fwd_bwd()
        finally:
            torch.set_num_threads(threads)

    info = {"version": torch.__version__, "threads": threads}
    return {"total": fwd_bwd, "total_1_thread": one_thread}, info


def _minor_faults():
    """Page faults this process has taken so far (None where ``resource`` is missing)."""
    try:
        import resource  # noqa: PLC0415  (Unix only)
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def run_grouped(candidates, passes, repeats, pause=0.2, warmup=0.15, faults=None, progress=None):
    """``{key: [[seconds per run] per pass]}``: per pass, every candidate
    ``repeats`` times in a row, after a pause and ``warmup`` seconds of
    untimed runs (at least one). ``faults``, a dict, gets each candidate's
    page faults per run (averaged over its timed runs) appended per pass.
    ``progress(i, key)``, if given, is called before candidate ``key`` of pass ``i``."""
    times = {key: [] for key in candidates}
    for i in range(passes):
        for key, fn in candidates.items():
            if progress is not None:
                progress(i, key)
            time.sleep(pause)  # let threads a previous candidate left spinning go to sleep
            t_end = time.perf_counter() + warmup
            fn()
            while time.perf_counter() < t_end:  # the first runs after an idle spell are slow
                fn()
            runs = []
            f0 = _minor_faults()
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                runs.append(time.perf_counter() - t0)
            if faults is not None and f0 is not None:
                faults.setdefault(key, []).append((_minor_faults() - f0) / repeats)
            times[key].append(runs)
    return times


def median_ratio(a, b):
    """Median over passes of median(a's runs) / median(b's runs)."""
    return statistics.median(statistics.median(x) / statistics.median(y) for x, y in zip(a, b))


def _all(runs):
    return [t for group in runs for t in group]


def check_same_gradients(Q, K, V, G):
    """PyTorch and refattn softmax compute the same gradients (else timing means nothing)."""
    try:
        import torch
    except ImportError:
        return None
    out, cache = attention(Q, K, V, activation="softmax")
    grads = attention_backward(G, cache)[:3]  # dQ, dK, dV
    q, k, v = (torch.from_numpy(x).requires_grad_(True) for x in (Q, K, V))
    o = torch.softmax((q @ k.transpose(-1, -2)) / np.sqrt(Q.shape[-1]), dim=-1) @ v
    o.backward(torch.from_numpy(G))
    return max(float(np.max(np.abs(a - b.grad.numpy()))) for a, b in
               zip(grads, (q, k, v)))


def main(argv=None):
    ap = machine.parser(__doc__, whole=True)
    ap.add_argument("--shape", type=machine.positive_int, nargs=4, default=(4, 4, 256, 64), metavar=("B", "H", "n", "d"))
    ap.add_argument("--repeats", type=machine.positive_int, default=5, help="runs per candidate and pass (default 5)")
    ap.add_argument("--passes", type=machine.positive_int, default=3, help="passes over all candidates (default 3)")
    ap.add_argument("--quick", action="store_true", help="(2, 2, 16, 8), 1 pass of 2 runs, no pauses: a smoke test")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--out", type=machine.output_file, help="also write the JSON to this file")
    args = ap.parse_args(argv)
    t_start, load_start = time.perf_counter(), _load()
    shape, repeats, passes, pause, warmup = (tuple(args.shape), args.repeats, args.passes, 0.2, 0.15)
    if args.quick:
        shape, repeats, passes, pause, warmup = (2, 2, 16, 8), 2, 1, 0.0, 0.0
    rng = np.random.default_rng(0)
    Q, K, V, G = (rng.standard_normal(shape) for _ in range(4))

    candidates = {}
    torch_fns, torch_info = torch_candidates(Q, K, V, G)
    for key, fn in (torch_fns or {}).items():
        candidates[("torch", key)] = fn
    for name in ACTIVATIONS:
        for key, fn in refattn_candidates(name, Q, K, V, G).items():
            candidates[(name, "refattn_" + key)] = fn
        for key, fn in autograd_candidates(name, Q, K, V, G).items():
            candidates[(name, "autograd_" + key)] = fn
    faults = {}
    print(f"timing {len(candidates)} candidates in {passes} passes of {repeats} runs each", file=sys.stderr, flush=True)

    first, last = next(iter(candidates)), [None]

    def progress(i, key):  # one line per pass, naming each activation as its turn comes
        if key == first:
            print(("\n" if i else "") + f"pass {i + 1} of {passes} ({time.perf_counter() - t_start:.0f} s):",
                  end="", file=sys.stderr, flush=True)
        if key == first or key[0] != last[0]:
            print(f" {key[0]}", end="", file=sys.stderr, flush=True)
        last[0] = key[0]

    times = run_grouped(candidates, passes, repeats, pause, warmup, faults, progress)
    print(f"\ntimed in {time.perf_counter() - t_start:.0f} s", file=sys.stderr, flush=True)

    def med(key):
        return statistics.median(_all(times[key]))

    soft = times[("softmax", "refattn_total")]
    rows = {}
    for name in ACTIVATIONS:
        t = lambda k: times[(name, k)]  # noqa: E731
        rows[name] = {
            "refattn_total_s": med((name, "refattn_total")),
            "refattn_total_min_s": min(_all(t("refattn_total"))),
            "refattn_backward_s": med((name, "refattn_backward")),
            "unblocked_total_s": med((name, "refattn_unblocked_total")),
            "reference_total_s": med((name, "refattn_reference_total")),
            "autograd_total_s": med((name, "autograd_total")),
            "autograd_backward_s": med((name, "autograd_backward")),
            "vs_refattn_softmax": median_ratio(t("refattn_total"), soft),
            "unblocked_over_blocked": median_ratio(t("refattn_unblocked_total"), t("refattn_total")),
            "reference_over_fast": median_ratio(t("refattn_reference_total"), t("refattn_total")),
            "autograd_over_analytic_backward": median_ratio(t("autograd_backward"), t("refattn_backward")),
            "autograd_over_analytic_total": median_ratio(t("autograd_total"), t("refattn_total")),
            "page_faults_per_run": {k: statistics.median(faults[(name, k)]) for k in
                                    ("refattn_total", "refattn_unblocked_total", "autograd_total")
                                    if (name, k) in faults},
        }
    torch_res = None
    if torch_info is not None:
        torch_res = dict(torch_info, total=med(("torch", "total")), total_1_thread=med(("torch", "total_1_thread")),
                         total_min=min(_all(times[("torch", "total")])))
    verdict = {
        "softmax_vs_torch": None if torch_res is None else median_ratio(soft, times[("torch", "total")]),
        "softmax_vs_torch_1_thread": None if torch_res is None else median_ratio(
            soft, times[("torch", "total_1_thread")]),
    }
    verdict["softmax_no_slower_than_torch"] = (None if torch_res is None
                                               else bool(verdict["softmax_vs_torch"] <= 1.0))
    verdict["all_within_1_5x_of_softmax"] = bool(all(r["vs_refattn_softmax"] <= 1.5 for r in rows.values()))
    verdict["analytic_backward_1_5x_faster_than_autograd"] = bool(
        all(r["autograd_over_analytic_backward"] >= 1.5 for r in rows.values()))
    result = {"shape": shape, "dtype": "float64", "repeats": repeats, "passes": passes,
              "timing": "median of passes x repeats runs; ratios: median over passes",
              "refattn_threads": parallel.num_threads(),
              "blas": _blas_info(),
              "rows": rows, "torch": torch_res,
              "torch_max_grad_diff": check_same_gradients(Q, K, V, G), "verdict": verdict,
              "candidates": len(candidates), "pause_s": pause, "warmup_s": warmup,
              "seconds": None, "load_average": [load_start, None], "cores": os.cpu_count(),
              "command": " ".join(["python benchmarks/bench_cpu_attention.py"] + list(
                  sys.argv[1:] if argv is None else argv)),
              "machine": {"python": platform.python_version(), "numpy": np.__version__,
                          "processor": platform.machine(), "cpu": cpu_name()}}
    result["seconds"], result["load_average"][1] = time.perf_counter() - t_start, _load()  # the whole run
    if args.out:
        machine.write_json(args.out, result)
    if args.json:
        print(json.dumps(result, indent=2))
        return result
    blas = result["blas"] or {}
    print(f"attention forward + backward, (B, H, n, d) = {shape}, float64, median of {passes} passes "
          f"x {repeats} runs; refattn on {result['refattn_threads']} thread(s); "
          f"CPU {result['machine']['cpu']}; OpenBLAS kernel {blas.get('core')}")
    if torch_res:
        print(f"PyTorch {torch_res['version']} eager softmax ({torch_res['threads']} threads): "
              f"{1e3 * torch_res['total']:.1f} ms (1 thread: {1e3 * torch_res['total_1_thread']:.1f} ms);  "
              f"max |grad difference| vs refattn {result['torch_max_grad_diff']:.1e}")
    print(f"{'activation':11s} {'fwd+bwd ms':>10s} {'/softmax':>9s} {'unblocked ms':>12s} {'reference ms':>12s} "
          f"{'bwd ms':>8s} {'autograd bwd ms':>15s} {'autograd/analytic bwd':>22s}")
    for name, r in rows.items():
        print(f"{name:11s} {1e3 * r['refattn_total_s']:10.1f} {r['vs_refattn_softmax']:9.2f} "
              f"{1e3 * r['unblocked_total_s']:12.1f} {1e3 * r['reference_total_s']:12.1f} "
              f"{1e3 * r['refattn_backward_s']:8.1f} "
              f"{1e3 * r['autograd_backward_s']:15.1f} {r['autograd_over_analytic_backward']:22.2f}")
    for k, v in verdict.items():
        print(f"{k}: {v if not isinstance(v, float) else f'{v:.2f}'}")
    return result


def _load():
    """The 1-minute load average, or None where the system does not report it."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _blas_info():
    """The BLAS refattn holds at one thread in blocked runs, and the kernel it chose (threadpoolctl)."""
    blas = parallel.blas_control()
    if blas is None:
        return None
    lib = blas.info()[0]
    return {"path": lib.get("filepath"), "threads": blas.get(), "core": lib.get("architecture"),
            "version": lib.get("version")}


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


if __name__ == "__main__":
    main()
