"""Time attention forward + backward for every activation (float64, CPU).

    python benchmarks/bench_attention.py            # (B, H, n, d) = (4, 4, 256, 64)
    python benchmarks/bench_attention.py --json     # machine-readable
    python benchmarks/bench_attention.py --quick    # tiny shape, a smoke test

For every registered activation with the scaled dot-product score it times

* ``refattn``: :func:`refattn.attention.attention` then
  :func:`refattn.attention.attention_backward` (the hand-derived backward);
* ``autograd``: the same forward traced by autograd, then autograd's backward
  (``make_vjp``), i.e. the same forward differentiated automatically;

and, as the external reference, plain PyTorch eager softmax attention in
float64 with its autograd backward (PyTorch is a benchmark-only dependency;
that row is skipped when it is not installed).

Targets (issue 2): refattn softmax no slower than PyTorch; every other
activation within 1.5x of refattn softmax; the analytic backward at least
1.5x faster than autograd's backward on the same forward. Each time is the
best of ``--repeats`` runs after one warm-up; the ratios are printed with
the verdicts.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
from autograd import make_vjp

from refattn import ACTIVATIONS
from refattn.attention import attention, attention_backward


def _best_time(fn, repeats):
    """Best of ``repeats`` runs after one warm-up: on a shared machine, noise
    only ever adds time, so the minimum is the most repeatable estimate
    (the advice of Python's ``timeit``)."""
    fn()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def bench_refattn(name, Q, K, V, G, repeats):
    def fwd_bwd():
        out, cache = attention(Q, K, V, activation=name)
        return attention_backward(G, cache)

    def fwd():
        return attention(Q, K, V, activation=name)

    out, cache = attention(Q, K, V, activation=name)
    t_total = _best_time(fwd_bwd, repeats)
    t_fwd = _best_time(fwd, repeats)
    t_bwd = _best_time(lambda: attention_backward(G, cache), repeats)
    return t_total, t_fwd, t_bwd


def bench_autograd(name, Q, K, V, G, repeats):
    def f(Q, K, V):
        return attention(Q, K, V, activation=name)[0]

    def fwd_bwd():
        vjp, _ = make_vjp(lambda qkv: f(*qkv))((Q, K, V))
        return vjp(G)

    vjp, _ = make_vjp(lambda qkv: f(*qkv))((Q, K, V))
    t_total = _best_time(fwd_bwd, repeats)
    t_bwd = _best_time(lambda: vjp(G), repeats)
    return t_total, t_bwd


def bench_torch(Q, K, V, G, repeats):
    try:
        import torch
    except ImportError:
        return None
    q, k, v, g = (torch.from_numpy(x) for x in (Q, K, V, G))
    scale = 1.0 / np.sqrt(Q.shape[-1])

    def fwd_bwd():
        qq, kk, vv = (t.detach().requires_grad_(True) for t in (q, k, v))
        w = torch.softmax((qq @ kk.transpose(-1, -2)) * scale, dim=-1)
        out = w @ vv
        out.backward(g)
        return qq.grad, kk.grad, vv.grad

    res = {"total": _best_time(fwd_bwd, repeats), "version": torch.__version__,
           "threads": torch.get_num_threads()}
    # NumPy's elementwise loops run on one core; PyTorch's use every thread.
    # The single-thread time shows how much of the gap is threads.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res["total_1_thread"] = _best_time(fwd_bwd, repeats)
    finally:
        torch.set_num_threads(threads)
    return res


def check_same_gradients(Q, K, V, G):
    """PyTorch and refattn softmax compute the same gradients (else timing means nothing)."""
    try:
        import torch
    except ImportError:
        return None
    out, cache = attention(Q, K, V, activation="softmax")
    grads = attention_backward(G, cache)
    q, k, v = (torch.from_numpy(x).requires_grad_(True) for x in (Q, K, V))
    o = torch.softmax((q @ k.transpose(-1, -2)) / np.sqrt(Q.shape[-1]), dim=-1) @ v
    o.backward(torch.from_numpy(G))
    return max(float(np.max(np.abs(a - b.grad.numpy()))) for a, b in
               ((grads["Q"], q), (grads["K"], k), (grads["V"], v)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", type=int, nargs=4, default=(4, 4, 256, 64), metavar=("B", "H", "n", "d"))
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="(2, 2, 16, 8), 2 repeats: a smoke test")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    shape, repeats = (tuple(args.shape), args.repeats) if not args.quick else ((2, 2, 16, 8), 2)
    rng = np.random.default_rng(0)
    Q, K, V, G = (rng.standard_normal(shape) for _ in range(4))

    rows = {}
    for name in ACTIVATIONS:
        t_total, t_fwd, t_bwd = bench_refattn(name, Q, K, V, G, repeats)
        a_total, a_bwd = bench_autograd(name, Q, K, V, G, repeats)
        rows[name] = {"refattn_total_s": t_total, "refattn_forward_s": t_fwd, "refattn_backward_s": t_bwd,
                      "autograd_total_s": a_total, "autograd_backward_s": a_bwd}
    torch_res = bench_torch(Q, K, V, G, repeats)
    soft = rows["softmax"]["refattn_total_s"]
    for name, r in rows.items():
        r["vs_refattn_softmax"] = r["refattn_total_s"] / soft
        r["autograd_over_analytic_backward"] = r["autograd_backward_s"] / r["refattn_backward_s"]
        r["autograd_over_analytic_total"] = r["autograd_total_s"] / r["refattn_total_s"]
    verdict = {
        "softmax_vs_torch": None if torch_res is None else soft / torch_res["total"],
        "softmax_vs_torch_1_thread": None if torch_res is None else soft / torch_res["total_1_thread"],
        "softmax_no_slower_than_torch": None if torch_res is None else bool(soft <= torch_res["total"]),
        "all_within_1_5x_of_softmax": bool(all(r["vs_refattn_softmax"] <= 1.5 for r in rows.values())),
        "analytic_backward_1_5x_faster_than_autograd": bool(
            all(r["autograd_over_analytic_backward"] >= 1.5 for r in rows.values())),
    }
    result = {"shape": shape, "dtype": "float64", "repeats": repeats, "rows": rows, "torch": torch_res,
              "torch_max_grad_diff": check_same_gradients(Q, K, V, G), "verdict": verdict,
              "machine": {"python": platform.python_version(), "numpy": np.__version__,
                          "processor": platform.machine()}}
    if args.json:
        print(json.dumps(result, indent=2))
        return result
    print(f"attention forward + backward, (B, H, n, d) = {shape}, float64, best of {repeats}")
    if torch_res:
        print(f"PyTorch {torch_res['version']} eager softmax ({torch_res['threads']} threads): "
              f"{1e3 * torch_res['total']:.1f} ms (1 thread: {1e3 * torch_res['total_1_thread']:.1f} ms);  "
              f"max |grad difference| vs refattn "
              f"{result['torch_max_grad_diff']:.1e}")
    print(f"{'activation':11s} {'fwd+bwd ms':>10s} {'/softmax':>9s} {'bwd ms':>8s} "
          f"{'autograd bwd ms':>15s} {'autograd/analytic bwd':>22s}")
    for name, r in rows.items():
        print(f"{name:11s} {1e3 * r['refattn_total_s']:10.1f} {r['vs_refattn_softmax']:9.2f} "
              f"{1e3 * r['refattn_backward_s']:8.1f} {1e3 * r['autograd_backward_s']:15.1f} "
              f"{r['autograd_over_analytic_backward']:22.2f}")
    for k, v in verdict.items():
        print(f"{k}: {v if not isinstance(v, float) else f'{v:.2f}'}")
    return result


if __name__ == "__main__":
    main()
