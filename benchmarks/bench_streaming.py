"""Peak memory and time of attention forward + backward against n: streaming and dense.

    python benchmarks/bench_streaming.py                       # n = 1k ... 64k (long: see below)
    python benchmarks/bench_streaming.py --ns 1024 16384       # chosen lengths
    python benchmarks/bench_streaming.py --quick               # tiny lengths, a smoke test
    python benchmarks/bench_streaming.py --out benchmarks/results/streaming.json

One head, ``d = 64``, float64, TanhMax, causal, blocks of the fast route's
own sizes (``--block-size`` sets them). For each ``n`` it measures forward +
backward (the output and the gradients for Q, K and V, from a random
upstream gradient) of

* ``streaming``: :func:`refattn.fast.streaming.streaming_attention` then
  :func:`~refattn.fast.streaming.streaming_attention_backward` (the fast
  route: strips of query rows on refattn's threads);
* ``reference``: the dense textbook path, :func:`refattn.core.attention.attention`
  and its backward, while ``n`` is at most ``--dense-max`` (it holds several
  ``n x n`` arrays: 2 GiB each at n = 16k);
* ``fast``: the dense fast path, :func:`refattn.fast.attention` and its
  backward, likewise;
* ``torch``: PyTorch's CPU ``scaled_dot_product_attention(..., is_causal=True)``
  with autograd's backward, float64, where PyTorch is installed (a
  benchmark-only dependency). It is softmax, not TanhMax: PyTorch has no
  other activation, so it is the yardstick, not a like-for-like row.

Memory. For the NumPy rows, the peak of :mod:`tracemalloc` (NumPy reports
its array buffers to it) during one forward + backward, the inputs
``Q, K, V, dY`` (``4 n d`` floats) allocated before and not counted; the
outputs and gradients are. PyTorch's allocations are invisible to
tracemalloc, so its row runs in a fresh process and reports the growth of
the resident set (``VmHWM`` after the runs, the high-water mark reset just
before them, minus ``VmRSS`` before them; not ``ru_maxrss``, which on Linux
keeps the parent's high-water mark across fork and exec): whole pages, so a
slight overestimate of the same quantity.

Time. The median of ``--repeats`` runs, measured without tracemalloc;
where a single run takes longer than ``--long`` seconds, the run with
tracemalloc is the only one and its time is recorded (flagged
``"timed_under_tracemalloc"``). The verdict at ``n = 1024`` (streaming within
3x of the dense path) is timed in groups as in ``bench_cpu_attention.py``: each
of ``--passes`` passes times streaming, reference and fast ``--repeats``
times in a row, and the ratio is the median over passes of the per-pass
ratio of medians, which cancels drift on a shared machine.

Threads. Streaming and the dense fast path run their blocks on refattn's
thread pool with BLAS held at one thread (``derivations/23-streaming.md``
section 8); the dense reference uses BLAS's default threads; PyTorch its
default intra-op threads. The JSON records them.

The JSON is rewritten after every length, with ``"complete": false`` until
the end, so a run that is cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402

from refattn import ACTIVATIONS, fast
from refattn.core import attention as reference
from refattn.fast import threads as fast_threads
from refattn.fast.streaming import streaming_attention, streaming_attention_backward

DEFAULT_NS = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
QUICK_NS = (128, 256)
MIB = 2.0 ** 20


def inputs(n, d, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((1, 1, n, d)) for _ in range(4))  # Q, K, V, dY: (1, 1, n, d)


def candidates(Q, K, V, G, activation, block_size):
    """``{name: callable}``, each one forward + backward returning the gradients."""

    def streaming():
        _, cache = streaming_attention(Q, K, V, activation=activation, causal=True, block_size=block_size)
        return streaming_attention_backward(G, cache)

    def dense():
        _, cache = reference.attention(Q, K, V, activation=activation, causal=True)
        return reference.attention_backward(G, cache)

    def fast_path():
        _, cache = fast.attention(Q, K, V, activation=activation, causal=True)
        return fast.attention_backward(G, cache)

    return {"streaming": streaming, "reference": dense, "fast": fast_path}


def traced_run(fn):
    """``(seconds, peak MiB)`` of one call under tracemalloc."""
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        fn()
        seconds = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return seconds, peak / MIB


def measure(fn, repeats, long):
    """Peak memory from one traced run; time from ``repeats`` untraced runs unless that run took > ``long`` s."""
    seconds, peak = traced_run(fn)
    row = {"peak_mib": peak}
    if seconds > long:
        row.update(time_s=seconds, runs=[seconds], timed_under_tracemalloc=True)
        return row
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    row.update(time_s=statistics.median(runs), runs=runs, timed_under_tracemalloc=False)
    return row


# --------------------------------------------------------------------------
# PyTorch, in a child process (its memory is invisible to tracemalloc)
# --------------------------------------------------------------------------


def _status_bytes(field):
    """``VmRSS`` (resident now) or ``VmHWM`` (its high-water mark) of this process, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # reported in kB
    raise OSError(f"/proc/self/status has no {field}")


def _reset_high_water():
    """Set ``VmHWM`` to the current resident size (Linux >= 4.0; harmless where refused)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def torch_child(n, d, repeats, long):
    """Run in the child: time and resident-memory growth of PyTorch SDPA forward + backward."""
    import torch  # noqa: PLC0415

    q, k, v, g = (torch.from_numpy(x) for x in inputs(n, d))

    def fwd_bwd():
        qq, kk, vv = (t.detach().requires_grad_(True) for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
        out.backward(g)
        return qq.grad, kk.grad, vv.grad

    _reset_high_water()
    base = _status_bytes("VmRSS")
    t0 = time.perf_counter()
    fwd_bwd()
    first = time.perf_counter() - t0
    runs = [first]
    if first <= long:
        runs = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fwd_bwd()
            runs.append(time.perf_counter() - t0)
    # VmHWM, not ru_maxrss: on Linux ru_maxrss keeps the parent's high-water mark across fork + exec
    peak = _status_bytes("VmHWM") - base
    return {"time_s": statistics.median(runs), "runs": runs, "peak_mib": max(peak, 0) / MIB,
            "peak_method": "resident-set growth (VmHWM after the runs - VmRSS before), fresh process",
            "version": torch.__version__, "threads": torch.get_num_threads()}


def torch_row(n, d, repeats, long, timeout):
    try:
        import torch  # noqa: F401, PLC0415
    except ImportError:
        return {"skipped": "PyTorch is not installed"}
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-child", str(n), "--d", str(d),
           "--repeats", str(repeats), "--long", str(long)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"skipped": f"took longer than --torch-timeout {timeout:g} s"}
    if res.returncode != 0:
        last = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit status {res.returncode}"
        return {"skipped": f"child failed: {last}"}
    return json.loads(res.stdout)


# --------------------------------------------------------------------------
# The n = 1024 verdict: grouped timing
# --------------------------------------------------------------------------


def grouped_ratio(cands, passes, repeats, pause=0.2):
    """Per pass, each candidate ``repeats`` times in a row (after a warm-up call);
    returns the medians per pass and the median over passes of streaming / dense."""
    medians = {k: [] for k in cands}
    for _ in range(passes):
        for key, fn in cands.items():
            time.sleep(pause)
            fn()
            runs = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                runs.append(time.perf_counter() - t0)
            medians[key].append(statistics.median(runs))
    ratio = {f"streaming_over_{k}": statistics.median(s / o for s, o in zip(medians["streaming"], medians[k]))
             for k in cands if k != "streaming"}
    return {"median_s": {k: statistics.median(v) for k, v in medians.items()}, "per_pass_s": medians, **ratio}


# --------------------------------------------------------------------------


def machine_info():
    info = machine.describe()
    blas = fast_threads.blas_control()
    if blas is not None:
        info["blas_threads_default"] = blas.get()
    info["refattn_fast_threads"] = fast.num_threads()
    return info


def table(rows):
    """A Markdown table of the rows (time in s, memory in MiB)."""
    def cell(r):
        if r is None or "skipped" in r:
            return "—"
        return f"{r['time_s']:.3g} s / {r['peak_mib']:.0f} MiB"

    lines = ["| n | streaming | dense reference | dense fast | PyTorch SDPA (softmax) |",
             "|---:|---:|---:|---:|---:|"]
    for n, r in rows.items():
        lines.append(f"| {int(n):,} | {cell(r.get('streaming'))} | {cell(r.get('reference'))} | "
                     f"{cell(r.get('fast'))} | {cell(r.get('torch'))} |")
    return "\n".join(lines)


def main(argv=None):
    ap = machine.parser(__doc__)
    ap.add_argument("--ns", type=machine.positive_int, nargs="+", help=f"sequence lengths (default {DEFAULT_NS})")
    ap.add_argument("--quick", action="store_true",
                    help=f"tiny lengths {QUICK_NS}, one repeat and one pass: a smoke test (options given still apply)")
    ap.add_argument("--d", type=machine.positive_int, default=64)
    ap.add_argument("--activation", default="tanhmax", choices=list(ACTIVATIONS))
    ap.add_argument("--block-size", type=machine.positive_int, default=None,
                    help="queries and keys per block (default: the fast route's own strips)")
    ap.add_argument("--dense-max", type=machine.positive_int, default=8192,
                    help="largest n for the dense rows (default 8192)")
    ap.add_argument("--repeats", type=machine.positive_int, help="timed runs per length (default 3)")
    ap.add_argument("--passes", type=machine.positive_int, help="passes of the grouped n = 1024 timing (default 5)")
    ap.add_argument("--long", type=machine.non_negative_float, default=20.0,
                    help="a run longer than this many seconds is timed once, under tracemalloc")
    ap.add_argument("--torch-timeout", type=machine.positive_float, default=1800.0)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    ap.add_argument("--out", type=machine.output_file, help="write the JSON here (rewritten after every length)")
    ap.add_argument("--torch-child", type=machine.positive_int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    machine.fill(args, {"ns": QUICK_NS, "repeats": 1, "passes": 1} if args.quick
                 else {"ns": DEFAULT_NS, "repeats": 3, "passes": 5})
    if args.torch_child is not None:
        print(json.dumps(torch_child(args.torch_child, args.d, args.repeats, args.long)))
        return 0
    ns, repeats, passes = tuple(args.ns), args.repeats, args.passes
    result = {
        "command": "python " + " ".join([os.path.relpath(__file__)] + (argv if argv is not None else sys.argv[1:])),
        "what": "forward + backward (dQ, dK, dV), one head, causal",
        "shape": ["1", "1", "n", str(args.d)], "dtype": "float64", "activation": args.activation,
        "block_size": args.block_size, "dense_max": args.dense_max, "repeats": repeats,
        "memory": "tracemalloc peak during the call (NumPy rows; inputs not counted); "
                  "PyTorch: resident-set growth in a fresh process",
        "machine": machine_info(), "rows": {}, "verdict": {}, "complete": False,
    }

    def save():
        if args.out:
            machine.write_json(args.out, result)

    # the n = 1024 verdict first: on a shared machine, the long runs come last
    n0 = 128 if args.quick else 1024
    Q, K, V, G = inputs(n0, args.d)
    g = grouped_ratio(candidates(Q, K, V, G, args.activation, args.block_size), passes, repeats)
    result["verdict"][f"time_n{n0}"] = g
    save()
    for n in ns:
        Q, K, V, G = inputs(n, args.d)
        row = {}
        for key, fn in candidates(Q, K, V, G, args.activation, args.block_size).items():
            if key != "streaming" and n > args.dense_max:
                row[key] = {"skipped": f"n > --dense-max {args.dense_max} "
                                       f"(one n x n float64 array is {n * n * 8 / MIB:,.0f} MiB)"}
                continue
            row[key] = measure(fn, repeats, args.long)
            print(f"n={n} {key}: {row[key]['time_s']:.3g} s, {row[key]['peak_mib']:.1f} MiB",
                  file=sys.stderr, flush=True)
        if not args.no_torch:
            row["torch"] = torch_row(n, args.d, repeats, args.long, args.torch_timeout)
        result["rows"][str(n)] = row
        save()
    if "16384" in result["rows"]:
        peak = result["rows"]["16384"]["streaming"]["peak_mib"]
        result["verdict"]["peak_n16384_mib"] = peak
        result["verdict"]["peak_n16384_under_128_mib"] = peak < 128
    if n0 == 1024:
        result["verdict"]["within_3x_of_reference_at_1024"] = g["streaming_over_reference"] <= 3
        result["verdict"]["within_3x_of_fast_at_1024"] = g["streaming_over_fast"] <= 3
    result["largest_n_streamed"] = max(int(n) for n in result["rows"]) if result["rows"] else None
    result["complete"] = True
    save()
    print(json.dumps(result, indent=1) if args.json else table(result["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
