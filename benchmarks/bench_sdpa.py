"""Streaming attention and the dense fast path beside PyTorch's fused CPU attention, in one process.

    .venv/bin/pip install -e ".[bench]"          # PyTorch (CPU), for this benchmark only
    .venv/bin/python benchmarks/bench_sdpa.py --threads 2 --out benchmarks/results/sdpa.json
    .venv/bin/python benchmarks/bench_sdpa.py --quick          # tiny sizes: a smoke test
    .venv/bin/python benchmarks/bench_sdpa.py --table benchmarks/results/sdpa.json   # print a saved run

For shape (1, 4, n, 64), softmax with the scaled dot score, float32 and
float64, causal and not, it times one forward + backward (the output and the
gradients for Q, K and V from a fixed random upstream gradient) of

* ``streaming``: :func:`refattn.fast.streaming.streaming_attention` and its
  backward (the fast route, its own strip sizes);
* ``dense``: the dense fast path, :func:`refattn.fast.attention` and
  :func:`refattn.fast.attention_backward`;
* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` (``is_causal``
  as the row says) with autograd's backward, PyTorch's fused CPU kernel;

and every activation's streaming time against softmax's. Targets: streaming
within 1.25x of SDPA at n = 4096 and 1.5x at n = 1024; the dense path under
``causal`` within 1.25x of SDPA; every activation's streaming within 1.5x of
softmax's. With ``--memory-n``, the peak memory (tracemalloc) of one
streaming forward + backward at that length, one head, float64 (target: under
128 MiB at n = 16,384).

Threads: refattn's pool and PyTorch's intra-op pool both get ``--threads``
(PyTorch's inter-op pool 1); refattn holds NumPy's BLAS at one thread while
its blocks run. The BLAS kernel is whatever NumPy's OpenBLAS chose when it
loaded (``OPENBLAS_CORETYPE`` overrides it, and must be set before Python
starts); the JSON records it, the CPU, the versions and the load average.

Timing, at steady state: per pass, each candidate runs after a 0.3 s pause
and ``--warmup`` seconds of untimed runs (at least one), then ``--repeats``
timed runs in a row; a
candidate's time is the median of its runs over all passes, and each ratio
the median over passes of the per-pass ratio of medians (its smallest and
largest over passes are the spread). Run it on a quiet machine: the load
average at start and end is in the JSON.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402
from bench_cpu_attention import run_grouped  # noqa: E402  (pause, warm-up, repeats in a row, per pass)

from refattn import ACTIVATIONS, fast  # noqa: E402
from refattn.fast.streaming import streaming_attention, streaming_attention_backward  # noqa: E402

TARGETS = {"streaming_over_sdpa": {1024: 1.5, 4096: 1.25}, "dense_causal_over_sdpa": 1.25,
           "activation_over_softmax": 1.5, "memory_mib": 128.0}
MIB = 2.0 ** 20


def _torch():
    try:
        import torch  # noqa: PLC0415  (a benchmark-only dependency)
    except ImportError:
        return None
    return torch


def inputs(n, dtype, heads=4, d=64, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((1, heads, n, d)).astype(dtype) for _ in range(4))  # Q, K, V, dY


def candidates(torch, Q, K, V, G, causal, activations=("softmax",)):
    """``{name: callable}``; each returns ``(out, dQ, dK, dV)`` as NumPy arrays."""

    def streaming(act):
        def run():
            out, cache = streaming_attention(Q, K, V, activation=act, causal=causal)
            return (out,) + streaming_attention_backward(G, cache)[:3]
        return run

    def dense():
        out, cache = fast.attention(Q, K, V, causal=causal)
        return (out,) + fast.attention_backward(G, cache)[:3]

    fns = {f"streaming/{act}": streaming(act) for act in activations}
    fns["dense"] = dense
    if torch is not None:
        q, k, v, g = (torch.from_numpy(x) for x in (Q, K, V, G))

        def sdpa():
            qq, kk, vv = (t.detach().requires_grad_(True) for t in (q, k, v))
            out = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
            out.backward(g)
            return tuple(t.detach().numpy() for t in (out, qq.grad, kk.grad, vv.grad))

        fns["sdpa"] = sdpa
    return fns


def summary(runs):
    """Milliseconds: the median and least over all runs, and each pass's median."""
    flat = [t for group in runs for t in group]
    return {"ms": 1e3 * statistics.median(flat), "min_ms": 1e3 * min(flat),
            "pass_median_ms": [1e3 * statistics.median(g) for g in runs]}


def ratio(a, b):
    """The median over passes of median(a) / median(b), and its least and largest over passes."""
    per_pass = [statistics.median(x) / statistics.median(y) for x, y in zip(a, b)]
    return {"ratio": statistics.median(per_pass), "spread": [min(per_pass), max(per_pass)]}


def max_rel(got, want):
    """Largest norm-wise relative difference of each of out, dQ, dK, dV."""
    return max(float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)) for a, b in zip(got, want))


def time_row(torch, dtype, causal, n, args, activations):
    Q, K, V, G = inputs(n, dtype)
    fns = candidates(torch, Q, K, V, G, causal, activations)
    times = run_grouped(fns, args.passes, args.repeats, pause=args.pause, warmup=args.warmup)
    row = {"dtype": dtype, "causal": causal, "n": n, "times": {name: summary(t) for name, t in times.items()}}
    soft = times["streaming/softmax"]
    if "sdpa" in times:
        row["streaming_over_sdpa"] = ratio(soft, times["sdpa"])
        row["dense_over_sdpa"] = ratio(times["dense"], times["sdpa"])
        want = fns["sdpa"]()
        row["max_rel_vs_sdpa"] = {"streaming": max_rel(fns["streaming/softmax"](), want),
                                  "dense": max_rel(fns["dense"](), want)}
    row["activation_over_softmax"] = {name.split("/")[1]: ratio(t, soft) for name, t in times.items()
                                      if name.startswith("streaming/") and name != "streaming/softmax"}
    return row


def memory_row(n, activation="softmax"):
    """Peak tracemalloc memory and time of one streaming forward + backward, (1, 1, n, 64) float64;
    the inputs are allocated before and not counted, the output and gradients are."""
    Q, K, V, G = inputs(n, np.float64, heads=1)
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        out, cache = streaming_attention(Q, K, V, activation=activation, causal=True)
        streaming_attention_backward(G, cache)
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return {"n": n, "shape": [1, 1, n, 64], "dtype": "float64", "activation": activation, "causal": True,
            "peak_mib": peak / MIB, "seconds_under_tracemalloc": seconds,
            "outputs_mib": 4 * n * 64 * 8 / MIB}


def verdicts(rows, memory):
    v = {}
    for row in rows:
        key = f"{row['dtype']}/{'causal' if row['causal'] else 'full'}/{row['n']}"
        target = TARGETS["streaming_over_sdpa"].get(row["n"])
        if "streaming_over_sdpa" in row and target is not None:
            v[f"streaming_over_sdpa/{key}"] = {"ratio": row["streaming_over_sdpa"]["ratio"], "target": target,
                                               "met": row["streaming_over_sdpa"]["ratio"] <= target}
        if "dense_over_sdpa" in row and row["causal"]:
            t = TARGETS["dense_causal_over_sdpa"]
            v[f"dense_over_sdpa/{key}"] = {"ratio": row["dense_over_sdpa"]["ratio"], "target": t,
                                           "met": row["dense_over_sdpa"]["ratio"] <= t}
        if row["activation_over_softmax"]:
            worst = max(row["activation_over_softmax"], key=lambda a: row["activation_over_softmax"][a]["ratio"])
            r = row["activation_over_softmax"][worst]["ratio"]
            v[f"activations_over_softmax/{key}"] = {"worst": worst, "ratio": r,
                                                    "target": TARGETS["activation_over_softmax"],
                                                    "met": r <= TARGETS["activation_over_softmax"]}
    if memory is not None:
        v[f"memory/n{memory['n']}"] = {"peak_mib": memory["peak_mib"], "target": TARGETS["memory_mib"],
                                       "met": memory["peak_mib"] < TARGETS["memory_mib"]}
    v["all_met"] = all(x["met"] for x in v.values())
    return v


def table(result):
    """The Markdown tables of a result: attention beside SDPA, activations, verdicts."""
    m = result["machine"]
    torch_info = m.get("torch") or {}
    lines = [f"CPU: {m['cpu']} ({m['cores']} cores); NumPy {m['numpy']}, OpenBLAS kernel {m['blas_kernel']}; "
             f"PyTorch {torch_info.get('version', 'not installed')}; threads: refattn {result['threads']['refattn']}, "
             f"PyTorch {result['threads'].get('torch')}; shape (1, 4, n, 64); medians of "
             f"{result['passes']} x {result['repeats']} runs after {result['warmup']:g} s of warm-up runs", "",
             "| dtype | causal | n | streaming ms | fast dense ms | SDPA ms | streaming / SDPA | dense / SDPA |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]

    def cell(r):
        return "—" if r is None else f"{r['ratio']:.2f} ({r['spread'][0]:.2f}–{r['spread'][1]:.2f})"

    for row in result["rows"]:
        t = row["times"]
        sd = t.get("sdpa", {}).get("ms")
        lines.append(f"| {row['dtype']} | {'yes' if row['causal'] else 'no'} | {row['n']} | "
                     f"{t['streaming/softmax']['ms']:.1f} | {t['dense']['ms']:.1f} | "
                     f"{'—' if sd is None else f'{sd:.1f}'} | {cell(row.get('streaming_over_sdpa'))} | "
                     f"{cell(row.get('dense_over_sdpa'))} |")
    acts = [r for r in result["rows"] if r["activation_over_softmax"]]
    if acts:
        names = list(acts[0]["activation_over_softmax"])
        lines += ["", "Streaming time / softmax's streaming time:", "",
                  "| dtype | causal | n | " + " | ".join(names) + " |", "|---|---|---:|" + "---:|" * len(names)]
        for row in acts:
            lines.append(f"| {row['dtype']} | {'yes' if row['causal'] else 'no'} | {row['n']} | "
                         + " | ".join(f"{row['activation_over_softmax'][a]['ratio']:.2f}" for a in names) + " |")
    if result.get("memory"):
        mem = result["memory"]
        lines += ["", f"Streaming forward + backward at n = {mem['n']:,} (one head, float64, causal): peak "
                      f"{mem['peak_mib']:.1f} MiB (tracemalloc; the output and three gradients are "
                      f"{mem['outputs_mib']:.0f} MiB of it), {mem['seconds_under_tracemalloc']:.1f} s."]
    lines += ["", "Verdicts: " + ", ".join(f"{k}: {'met' if v['met'] else 'NOT met'}"
                                           for k, v in result["verdict"].items() if k != "all_met")]
    return "\n".join(lines)


QUICK = {"ns": [64], "passes": 1, "repeats": 1, "warmup": 0.0, "pause": 0.0, "memory_n": 256}
FULL = {"ns": [1024, 4096], "passes": 3, "repeats": 3, "warmup": 0.5, "pause": 0.3, "memory_n": 16384}


def print_table(ap, path):
    """Print the tables of a saved run; a file that is missing or not such a run is one line (exit 2)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = table(json.load(fh))
    except OSError as exc:
        machine.fail(ap, "--table", "a JSON file saved by --out", f"{path} ({exc.strerror})")
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        what = f"no {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        machine.fail(ap, "--table", "a JSON file saved by --out", f"{path} ({type(exc).__name__}: {what})")
    print(text)


def main(argv=None):
    ap = machine.parser(__doc__)
    ap.add_argument("--ns", type=machine.positive_int, nargs="+", help="lengths n (default 1024 4096)")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"], choices=["float32", "float64"])
    ap.add_argument("--causal", nargs="+", default=["yes", "no"], choices=["yes", "no"])
    ap.add_argument("--threads", type=machine.positive_int, default=2,
                    help="refattn's and PyTorch's threads (default 2)")
    ap.add_argument("--passes", type=machine.positive_int, help="passes over the candidates (default 3)")
    ap.add_argument("--repeats", type=machine.positive_int, help="timed runs in a row per pass (default 3)")
    ap.add_argument("--warmup", type=machine.non_negative_float,
                    help="seconds of untimed runs (at least one) before each candidate's timed ones (default 0.5)")
    ap.add_argument("--pause", type=machine.non_negative_float, help="seconds before each candidate (default 0.3)")
    ap.add_argument("--activations", nargs="*", default=list(ACTIVATIONS), choices=list(ACTIVATIONS),
                    help="activations whose streaming is timed against softmax's (none: only softmax)")
    ap.add_argument("--memory-n", type=machine.non_negative_int,
                    help="length of the memory row (0: none; default 16384)")
    ap.add_argument("--quick", action="store_true",
                    help="n = 64, one pass of one run, no pauses (options given still apply)")
    ap.add_argument("--no-torch", action="store_true", help="leave PyTorch out even if it is installed")
    ap.add_argument("--json", action="store_true", help="print the JSON instead of the tables")
    ap.add_argument("--out", type=machine.output_file, help="write the JSON here (rewritten after every row)")
    ap.add_argument("--table", metavar="JSON", help="print the tables of a saved run and exit")
    args = ap.parse_args(argv)
    if args.table:
        print_table(ap, args.table)
        return 0
    machine.fill(args, QUICK if args.quick else FULL)
    torch = None if args.no_torch else _torch()
    fast.set_num_threads(args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set in this process
            pass
    activations = ["softmax"] + [a for a in args.activations if a != "softmax"]
    result = {"command": "python " + " ".join([os.path.relpath(__file__)] + list(sys.argv[1:] if argv is None else argv)),
              "what": "forward + backward (dQ, dK, dV), softmax, scaled dot score, shape (1, 4, n, 64)",
              "threads": {"refattn": fast.num_threads(), "torch": None if torch is None else torch.get_num_threads(),
                          "blas_while_refattn_runs": 1},
              "passes": args.passes, "repeats": args.repeats, "warmup": args.warmup, "targets": {
                  "streaming_over_sdpa": {str(k): v for k, v in TARGETS["streaming_over_sdpa"].items()},
                  **{k: v for k, v in TARGETS.items() if k != "streaming_over_sdpa"}},
              "machine": machine.describe(torch), "rows": [], "memory": None, "verdict": {}, "complete": False}

    def save():
        if args.out:
            machine.write_json(args.out, result)

    for dtype in args.dtypes:
        for causal in (c == "yes" for c in args.causal):
            for n in args.ns:
                row = time_row(torch, dtype, causal, n, args, activations)
                result["rows"].append(row)
                print(f"{dtype} causal={causal} n={n}: " + ", ".join(f"{k} {v['ms']:.1f} ms"
                                                                      for k, v in row["times"].items()),
                      file=sys.stderr, flush=True)
                save()
    if args.memory_n:
        result["memory"] = memory_row(args.memory_n)
    result["verdict"] = verdicts(result["rows"], result["memory"])
    result["machine"]["load_average_at_end"] = list(os.getloadavg())
    result["complete"] = True
    save()
    print(json.dumps(result, indent=1) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
