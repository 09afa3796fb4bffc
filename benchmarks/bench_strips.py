"""Streaming's fast route at other strip sizes: each activation's time against softmax's, on one thread.

    .venv/bin/python benchmarks/bench_strips.py --out benchmarks/results/strips.json
    .venv/bin/python benchmarks/bench_strips.py --n 1024 --sizes 1,128,1024 1,128,4096
    .venv/bin/python benchmarks/bench_strips.py --quick       # a smoke test

For each strip size ``g,bq,bk`` (slices per unit, query rows per strip, keys
per block; :func:`refattn.fast.streaming_fast.strip_sizes` chooses them
otherwise) and dtype, one forward + backward of
:func:`refattn.fast.streaming.streaming_attention` at shape (1, 4, n, 64),
not causal, for every activation. Time is the CPU time of the process
(``time.process_time``, best of ``--repeats`` after a warm-up run) with one
refattn thread and BLAS on one thread: it counts the work, and a busy
machine disturbs it much less than wall-clock time. Derivation 23, section
8, quotes it: the block size that keeps every activation within a small
factor of softmax, and what larger blocks cost.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402

from refattn import ACTIVATIONS, fast  # noqa: E402
from refattn.fast import streaming_fast  # noqa: E402
from refattn.fast.streaming import streaming_attention, streaming_attention_backward  # noqa: E402


def cpu_ms(fn, repeats):
    """The least CPU time (ms) of ``repeats`` calls, after one untimed call."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return 1e3 * best


def measure(n, dtype, size, activations, repeats):
    """``{activation: ms}`` at one strip size (``None``: the route's own choice)."""
    real = streaming_fast.strip_sizes
    if size is not None:
        g, bq, bk = size
        streaming_fast.strip_sizes = lambda slices, n_q, n_k, *a, **k: (min(g, slices), min(bq, n_q), min(bk, n_k))
    try:
        rng = np.random.default_rng(0)
        Q, K, V, G = (rng.standard_normal((1, 4, n, 64)).astype(dtype) for _ in range(4))
        out = {}
        for act in activations:
            def run():
                _, cache = streaming_attention(Q, K, V, activation=act)
                return streaming_attention_backward(G, cache)
            out[act] = cpu_ms(run, repeats)
        return out
    finally:
        streaming_fast.strip_sizes = real


QUICK = {"n": [128], "sizes": ["auto", "1,32,64"], "repeats": 1}
FULL = {"n": [1024, 4096], "sizes": ["auto", "1,128,1024", "1,128,2048", "1,128,4096"], "repeats": 3}


def main(argv=None):
    ap = machine.parser(__doc__)
    ap.add_argument("--n", type=machine.positive_int, nargs="+", help="lengths n (default 1024 4096)")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"], choices=["float32", "float64"])
    ap.add_argument("--sizes", nargs="+",
                    help="strip sizes g,bq,bk ('auto': the route's own; default auto 1,128,1024 1,128,2048 1,128,4096)")
    ap.add_argument("--repeats", type=machine.positive_int, help="timed runs, the least kept (default 3)")
    ap.add_argument("--quick", action="store_true", help="n = 128, two sizes, one repeat (options given still apply)")
    ap.add_argument("--out", type=machine.output_file, help="write the JSON here")
    args = ap.parse_args(argv)
    machine.fill(args, QUICK if args.quick else FULL)
    sizes = []
    for text in args.sizes:
        try:
            sizes.append(None if text == "auto" else tuple(int(x) for x in text.split(",")))
        except ValueError:
            machine.fail(ap, "--sizes", "'auto' or three ints g,bq,bk", repr(text))
        if sizes[-1] is not None and (len(sizes[-1]) != 3 or min(sizes[-1]) < 1):
            machine.fail(ap, "--sizes", "three positive ints g,bq,bk", repr(text))
    fast.set_num_threads(1)
    rows = []
    for n in args.n:
        for dtype in args.dtypes:
            for size, text in zip(sizes, args.sizes):
                ms = measure(n, dtype, size, ACTIVATIONS, args.repeats)
                auto = streaming_fast.strip_sizes(4, n, n, np.dtype(dtype).itemsize, workers=1)
                row = {"n": n, "dtype": dtype, "sizes": list(auto if size is None else size), "asked": text,
                       "cpu_ms": ms, "over_softmax": {a: ms[a] / ms["softmax"] for a in ms}}
                rows.append(row)
                worst = max(row["over_softmax"], key=row["over_softmax"].get)
                print(f"n={n} {dtype} sizes {text} ({row['sizes']}): softmax {ms['softmax']:.0f} ms; worst "
                      f"{worst} {row['over_softmax'][worst]:.2f}x; "
                      + " ".join(f"{a} {r:.2f}" for a, r in row["over_softmax"].items()), flush=True)
    result = {"command": "python " + " ".join([os.path.relpath(__file__)] + list(sys.argv[1:] if argv is None else argv)),
              "what": "streaming forward + backward, (1, 4, n, 64), not causal, CPU time of the process, one "
                      "refattn thread, BLAS on one thread; best of the repeats after a warm-up",
              "repeats": args.repeats, "machine": machine.describe(), "rows": rows}
    if args.out:
        machine.write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
