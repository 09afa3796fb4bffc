"""Where streaming attention's time goes beside PyTorch's fused attention: CPU time on one thread, by part.

Three measurements, each as CPU time of this process (``time.process_time``)
on one thread (refattn's pool, NumPy's BLAS and PyTorch's intra-op pool all
at 1), which other work on a shared machine disturbs far less than wall time:

* ``whole``: one forward + backward of streaming attention (softmax, scaled
  dot score, the fast route) and of ``scaled_dot_product_attention`` with
  autograd, shape (1, 4, n, 64), causal and not, the best of ``--repeats``;
* ``parts``: the operations one block of streaming attention is made of, at
  its size (128 query rows, the keys of one block: ``strip_sizes``), on
  NumPy and on PyTorch: the three kinds of matrix product (``q K^T``, ``W V``,
  ``W^T dY``), ``exp``, the row sum and an elementwise product;
* ``count``: how many of each part one forward + backward runs (the route's
  structure: 2 products forward and 5 backward per block, ``exp`` once in
  each pass), so that ``parts x count`` says what the products and the
  elementwise passes cost of the whole.

    python benchmarks/profile_streaming.py --out benchmarks/results/streaming_profile.json

Not part of the test run; nothing here asserts a time.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads its BLAS

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402

from refattn import fast  # noqa: E402
from refattn.fast.streaming import streaming_attention, streaming_attention_backward  # noqa: E402
from refattn.fast.streaming_fast import strip_sizes  # noqa: E402


def cpu_ms(f, repeats):
    """The smallest CPU time of ``repeats`` calls of ``f`` after one untimed call, in ms."""
    f()
    best = []
    for _ in range(repeats):
        t = time.process_time()
        f()
        best.append(time.process_time() - t)
    return 1e3 * min(best)


def whole(torch, dtype, causal, n, repeats):
    rng = np.random.default_rng(0)
    Q, K, V, G = (rng.standard_normal((1, 4, n, 64)).astype(dtype) for _ in range(4))

    def streaming():
        out, cache = streaming_attention(Q, K, V, causal=causal)
        return streaming_attention_backward(G, cache)

    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (Q, K, V))
    tg = torch.tensor(G)

    def sdpa():
        out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        return torch.autograd.grad(out, (tq, tk, tv), tg)

    a, b = cpu_ms(streaming, repeats), cpu_ms(sdpa, repeats)
    return {"dtype": dtype, "causal": causal, "n": n, "streaming_ms": a, "sdpa_ms": b, "ratio": a / b}


def parts(torch, dtype, n, repeats):
    """Microseconds of each part of one block, NumPy and PyTorch."""
    _, bq, bk = strip_sizes(4, n, n, np.dtype(dtype).itemsize)
    rng = np.random.default_rng(0)
    q, K, V = (rng.standard_normal(s).astype(dtype) for s in ((bq, 64), (bk, 64), (bk, 64)))
    S = rng.standard_normal((bq, bk)).astype(dtype)
    tq, tK, tV, tS = map(torch.from_numpy, (q, K, V, S))
    ops = {"q K^T": (lambda: q @ K.T, lambda: tq @ tK.T), "W V": (lambda: S @ V, lambda: tS @ tV),
           "W^T dY": (lambda: S.T @ q, lambda: tS.T @ tq), "exp": (lambda: np.exp(S), lambda: torch.exp(tS)),
           "row sum": (lambda: np.sum(S, axis=-1, keepdims=True), lambda: tS.sum(-1, keepdim=True)),
           "product": (lambda: S * S, lambda: tS * tS)}
    reps = 20 * repeats
    return {"block": [bq, bk], "us": {name: {"numpy": 1e3 * cpu_ms(a, reps), "torch": 1e3 * cpu_ms(b, reps)}
                                      for name, (a, b) in ops.items()}}


def main(argv=None):
    ap = machine.parser(__doc__)
    ap.add_argument("--ns", type=machine.positive_int, nargs="+", default=[1024, 4096])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"], choices=["float32", "float64"])
    ap.add_argument("--repeats", type=machine.positive_int, default=3)
    ap.add_argument("--out", type=machine.output_file, help="write the results as JSON here")
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: PLC0415  (the bench extra)
    except ImportError:
        ap.exit(2, f"{ap.prog}: PyTorch is not installed; pip install -e '.[bench]'\n")
    fast.set_num_threads(1)
    torch.set_num_threads(1)
    result = {"command": " ".join(["python benchmarks/profile_streaming.py"] + list(sys.argv[1:] if argv is None
                                                                                     else argv)),
              "what": "CPU time on one thread: streaming attention (softmax) and SDPA forward + backward, shape "
                      "(1, 4, n, 64); the parts of one streaming block on NumPy and PyTorch",
              "machine": machine.describe(torch), "whole": [], "parts": {}}
    for dtype in args.dtypes:
        for n in args.ns:
            for causal in (True, False):
                row = whole(torch, dtype, causal, n, args.repeats)
                result["whole"].append(row)
                print(f"{dtype} causal={causal} n={n}: streaming {row['streaming_ms']:.1f} ms, SDPA "
                      f"{row['sdpa_ms']:.1f} ms, ratio {row['ratio']:.2f}", flush=True)
        result["parts"][dtype] = parts(torch, dtype, max(args.ns), args.repeats)
        print(dtype, "one block", result["parts"][dtype]["block"], ", ".join(
            f"{k} {v['numpy']:.0f}/{v['torch']:.0f} us" for k, v in result["parts"][dtype]["us"].items()), flush=True)
    result["machine"]["load_average_at_end"] = list(os.getloadavg())
    if args.out:
        machine.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
