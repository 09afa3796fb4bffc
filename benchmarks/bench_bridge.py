"""refattn.torch beside plain PyTorch: forward + backward of attention, the same formula both ways.

    python benchmarks/bench_bridge.py                        # (B, H, n, d) = (4, 4, 256, 64)
    python benchmarks/bench_bridge.py --out FILE.json        # also save the JSON
    python benchmarks/bench_bridge.py --quick                # tiny shape, one short pass: a smoke test

Two cases, each timed as a researcher would pick between them, scaled
dot-product scores, forward then backward of the output against a random
cotangent (``torch.autograd.grad`` for q, k and v):

* ``softmax``: ``refattn.torch.attention(q, k, v, activation="softmax")``
  against ``F.softmax(q @ k^T / sqrt(d), -1) @ v`` (PyTorch's fused softmax);
* ``rectified``: an activation of your own, ``g = relu(e^s - 1)``,
  ``h = |e^s - 1|``, written as ``g(s, xp)`` and given to
  ``refattn.define_activation`` (its derivatives left to PyTorch's forward
  mode), against the same two functions written directly,
  ``g(S) / sum_k h(S) @ v``, differentiated by PyTorch's autograd.

Each in float32 and float64, on one thread and on PyTorch's default
threads. Every pair is checked to give the same output and gradients first
(to 1e-10 of their size in float64, 1e-4 in float32). Timing: per pass, the
two candidates of a row take turns, ``--repeats`` runs each after a warm-up
(``bench_cpu_attention.run_grouped``, wall-clock); a ratio is the median over passes of
the ratio of the two medians in that pass, so both see the same machine
load. The targets: softmax within 1.2x of plain, the formula of your own
within 1.5x. The JSON records the machine, the versions and the command.
"""

from __future__ import annotations

import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402  (this folder's option checks and machine description)
from bench_cpu_attention import median_ratio, run_grouped  # noqa: E402  (the same timing as the CPU benchmark)

#: The targets for refattn.torch's time over plain PyTorch's, per case.
TARGETS = {"softmax": 1.2, "rectified": 1.5}


def rectified_g(s, xp):
    return xp.maximum(xp.expm1(s), 0.0)  # relu(e^s - 1)


def rectified_h(s, xp):
    return xp.abs(xp.expm1(s))  # |e^s - 1|


def candidates(torch, case, q, k, v, dout):
    """``(plain, refattn)``: two functions that each run one forward + backward and return the output and
    the gradients of q, k and v."""
    import torch.nn.functional as F  # noqa: PLC0415  (the bench extra)

    import refattn  # noqa: PLC0415
    import refattn.torch as rt  # noqa: PLC0415
    from refattn.core.backend import array_module  # noqa: PLC0415

    scale = 1.0 / math.sqrt(q.shape[-1])
    if case == "softmax":
        def plain_weights(s):
            return F.softmax(s, dim=-1)
        act = "softmax"
    else:
        def plain_weights(s):
            xp = array_module(s)  # the namespace refattn hands the same two functions
            return rectified_g(s, xp) / xp.sum(rectified_h(s, xp), axis=-1, keepdims=True)
        act = refattn.define_activation("rectified", rectified_g, rectified_h, singular_scores=[0.0])

    def plain():
        out = plain_weights(q @ k.transpose(-1, -2) * scale) @ v  # (B, H, n, d)
        return (out, *torch.autograd.grad(out, (q, k, v), dout))

    def ours():
        out = rt.attention(q, k, v, activation=act)  # (B, H, n, d)
        return (out, *torch.autograd.grad(out, (q, k, v), dout))

    return plain, ours


def agree(a, b):
    """The largest difference between the two candidates' results, relative to each result's largest entry."""
    return max(float((x - y).detach().abs().max() / y.detach().abs().max()) for x, y in zip(a, b))


def measure(torch, case, dtype, threads, shape, passes, repeats, pause, warmup):
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, dtype=dtype, generator=gen, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, dtype=dtype, generator=gen)
    plain, ours = candidates(torch, case, q, k, v, dout)
    difference = agree(ours(), plain())
    limit = 1e-10 if dtype == torch.float64 else 1e-4
    if not difference <= limit:
        raise SystemExit(f"bench_bridge: {case} {dtype}: refattn.torch and plain PyTorch differ by {difference:.3g} "
                         f"relative (more than {limit:g}); timing a wrong result means nothing")
    times = run_grouped({"plain": plain, "refattn": ours}, passes, repeats, pause, warmup)
    row = {"case": case, "dtype": str(dtype).removeprefix("torch."), "threads": threads}
    for key, runs in times.items():
        row[f"{key}_ms"] = round(1e3 * statistics.median(statistics.median(r) for r in runs), 3)
    row["ratio"] = round(median_ratio(times["refattn"], times["plain"]), 3)
    return {**row, "target": TARGETS[case], "met": bool(row["ratio"] <= TARGETS[case]),
            "relative_difference": difference}


def main(argv=None):
    ap = machine.parser(__doc__, whole=True)
    ap.add_argument("--shape", type=machine.positive_int, nargs=4, default=None, metavar=("B", "H", "n", "d"))
    ap.add_argument("--repeats", type=machine.positive_int, default=None, help="runs per candidate and pass (10)")
    ap.add_argument("--passes", type=machine.positive_int, default=None, help="passes over both candidates (7)")
    ap.add_argument("--pause", type=machine.non_negative_float, default=None, help="seconds before each candidate (0.2)")
    ap.add_argument("--warmup", type=machine.non_negative_float, default=None, help="seconds of untimed runs (0.3)")
    ap.add_argument("--quick", action="store_true", help="(2, 2, 16, 8), one pass of two runs: a smoke test")
    ap.add_argument("--out", type=machine.output_file, default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    machine.fill(args, {"shape": (2, 2, 16, 8), "repeats": 2, "passes": 1, "pause": 0.0, "warmup": 0.0}
                 if args.quick else {"shape": (4, 4, 256, 64), "repeats": 10, "passes": 7, "pause": 0.2,
                                     "warmup": 0.3})
    try:
        import torch  # noqa: PLC0415  (the bench extra)
    except ImportError:
        ap.exit(2, "bench_bridge.py: needs PyTorch (the torch extra): pip install -e '.[torch]'\n")
    default_threads = torch.get_num_threads()
    rows = []
    for threads in dict.fromkeys((1, default_threads)):
        for dtype in (torch.float32, torch.float64):
            for case in TARGETS:
                rows.append(measure(torch, case, dtype, threads, tuple(args.shape), args.passes, args.repeats,
                                    args.pause, args.warmup))
                r = rows[-1]
                print(f"{case:>9} {r['dtype']} {threads:>2} thread(s): plain {r['plain_ms']:8.2f} ms, refattn.torch "
                      f"{r['refattn_ms']:8.2f} ms, ratio {r['ratio']:.2f} (target <= {r['target']}: "
                      f"{'met' if r['met'] else 'MISSED'})", flush=True)
    torch.set_num_threads(default_threads)
    result = {"command": "python benchmarks/bench_bridge.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "shape": list(args.shape), "passes": args.passes, "repeats": args.repeats, "rows": rows,
              "machine": machine.describe(torch)}
    if args.out:
        machine.write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
