"""Every activation through PyTorch's FlexAttention beside SDPA, refattn.torch and streaming, in one process.

    .venv/bin/pip install -e ".[torch]"
    .venv/bin/python benchmarks/bench_flex.py --out benchmarks/results/flex.json          # CPU
    .venv/bin/python benchmarks/bench_flex.py --device cuda --out flex-gpu.json           # a CUDA device
    .venv/bin/python benchmarks/bench_flex.py --quick                 # tiny sizes, dense kernel: a smoke test
    .venv/bin/python benchmarks/bench_flex.py --table benchmarks/results/flex.json        # print a saved run

For shape (1, 4, n, 64), the scaled dot score, no mask, per activation,
dtype and length, it times

* ``flex``: :func:`refattn.flex.attention` with ``--kernel`` (default
  ``compiled``: FlexAttention under ``torch.compile``, the fused kernel), the
  routes of derivation 24;
* ``refattn.torch``: :func:`refattn.torch.attention` (the scores formed,
  core's forward and hand-derived backward on the tensors' device);
* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` (softmax
  only: the fused kernel every route is measured against);
* ``streaming`` (CPU only): :func:`refattn.fast.streaming.streaming_attention`
  on NumPy, the O(n)-memory route of derivation 23;

each as forward + backward (the output and the gradients for q, k and v from
a fixed upstream gradient) and, where a candidate has no backward (PyTorch's
FlexAttention on the CPU: ``refattn.flex.SUPPORT``), as the forward alone, so
that every ratio compares like with like (``mode`` in the JSON). A candidate
that the kernel does not run (the compiled kernel on the CPU, which
``refattn.flex`` refuses) is recorded with the reason, not timed. Before
timing, each candidate's output and gradients are compared with
``refattn.torch``'s (``max_rel``): a fast wrong answer is no result.

Targets on a GPU (derivation 24, section 9): ``flex`` within 1.5x of SDPA for
the activations with rho = 1 and within 3x for the others. On the CPU there
are no targets; the JSON records the CPU, the BLAS kernel, NumPy's and
PyTorch's versions and threads, and the load average at start and end, without
which a CPU ratio means nothing. Each candidate is timed as in
``bench_sdpa.py`` (a pause, ``--warmup`` seconds of untimed runs, then
``--repeats`` timed runs per pass; medians; each ratio the median over passes),
on CUDA with the device synchronised after every run. The first untimed run
of ``flex`` includes ``torch.compile``'s compilation (about 40 s per route and
length on two CPU cores).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402
from bench_cpu_attention import run_grouped  # noqa: E402
from bench_sdpa import ratio, summary  # noqa: E402

from refattn import ACTIVATIONS  # noqa: E402

#: activations whose route is one call with t = ell (derivation 24, section 3): the 1.5x target; others 3x
RHO_ONE = ("softmax", "expressive", "sigsoftmax", "sigmoid", "cosformer")
TARGETS = {"flex_over_sdpa_rho_one": 1.5, "flex_over_sdpa_signed": 3.0}
SHAPE = (1, 4, 64)  # (B, H, d)


def _torch(ap):
    try:
        import torch  # noqa: PLC0415  (the torch extra)
    except ImportError:
        machine.fail(ap, "torch", "PyTorch (the torch extra: pip install 'refattn[torch]')", "not installed")
    return torch


def inputs(torch, n, dtype, device, seed=0):
    """q, k, v and the upstream gradient, (B, H, n, d) each, from N(0, 1)."""
    rng = np.random.default_rng(seed)
    B, H, d = SHAPE
    return tuple(torch.from_numpy(rng.standard_normal((B, H, n, d))).to(device=device, dtype=dtype)
                 for _ in range(4))


def candidates(torch, name, q, k, v, g, kernel, backward):
    """``{candidate: run}``; each run returns the output (and, with ``backward``, dq, dk, dv) as tensors."""
    import refattn.flex as rf  # noqa: PLC0415
    import refattn.torch as rt  # noqa: PLC0415
    from refattn.fast.streaming import streaming_attention, streaming_attention_backward  # noqa: PLC0415

    sync = torch.cuda.synchronize if q.device.type == "cuda" else (lambda: None)

    def timed(forward):
        def run():
            if not backward:
                with torch.no_grad():
                    out = (forward(q, k, v),)
            else:
                qq, kk, vv = (t.detach().requires_grad_(True) for t in (q, k, v))
                y = forward(qq, kk, vv)
                y.backward(g)
                out = (y.detach(), qq.grad, kk.grad, vv.grad)
            sync()
            return out
        return run

    fns = {"flex": timed(lambda a, b, c: rf.attention(a, b, c, activation=name, kernel=kernel)),
           "refattn.torch": timed(lambda a, b, c: rt.attention(a, b, c, activation=name))}
    if name == "softmax":
        fns["sdpa"] = timed(torch.nn.functional.scaled_dot_product_attention)
    if q.device.type == "cpu":
        Q, K, V, G = (t.numpy() for t in (q, k, v, g))

        def streaming():
            y, cache = streaming_attention(Q, K, V, activation=name)
            out = (y,) + (streaming_attention_backward(G, cache)[:3] if backward else ())
            return tuple(torch.from_numpy(np.asarray(x)) for x in out)

        fns["streaming"] = streaming
    return fns


def max_rel(got, want):
    """The largest norm-wise relative difference over the output and the gradients."""
    return max(float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-300))
               for a, b in zip(got, want))


def supported(run):
    """``None`` if ``run`` runs, else PyTorch's (or refattn.flex's) one-line reason."""
    try:
        run()
    except (NotImplementedError, RuntimeError, TypeError) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return None


def time_row(torch, name, dtype, n, mode, args):
    q, k, v, g = inputs(torch, n, getattr(torch, dtype), args.device)
    fns = candidates(torch, name, q, k, v, g, args.kernel, mode == "forward + backward")
    row = {"activation": name, "dtype": dtype, "n": n, "mode": mode, "not_run": {}, "max_rel": {}}
    for key in list(fns):
        why = supported(fns[key])
        if why is not None:
            row["not_run"][key] = why
            del fns[key]
    if not any(key != "refattn.torch" and key != "sdpa" for key in fns):
        return row  # nothing but the references: nothing to compare
    want = fns["refattn.torch"]()
    row["max_rel"] = {key: max_rel(fn(), want) for key, fn in fns.items() if key not in ("refattn.torch", "sdpa")}
    times = run_grouped(fns, args.passes, args.repeats, pause=args.pause, warmup=args.warmup)
    row["times"] = {key: summary(t) for key, t in times.items()}
    row["_runs"] = times
    return row


def add_ratios(rows):
    """Each row's ``flex`` and ``streaming`` over SDPA (softmax's row of the same dtype, n and mode), and
    ``flex`` over refattn.torch, where both were timed."""
    sdpa = {(r["dtype"], r["n"], r["mode"]): r["_runs"]["sdpa"] for r in rows if "sdpa" in r.get("_runs", {})}
    for r in rows:
        runs = r.pop("_runs", {})
        base = sdpa.get((r["dtype"], r["n"], r["mode"]))
        if "flex" in runs:
            r["flex_over_refattn_torch"] = ratio(runs["flex"], runs["refattn.torch"])
        for key in ("flex", "streaming"):
            if key in runs and base is not None:
                r[f"{key}_over_sdpa"] = ratio(runs[key], base)


def verdicts(rows, device):
    """The GPU targets, per activation, dtype and n, for forward + backward on CUDA (none on the CPU)."""
    if device != "cuda":
        return {"note": "no targets on the CPU: the ratios are reported with the machine and versions"}
    v = {}
    for r in rows:
        if "flex_over_sdpa" in r and r["mode"] == "forward + backward":
            key = "flex_over_sdpa_rho_one" if r["activation"] in RHO_ONE else "flex_over_sdpa_signed"
            v[f"{key}/{r['activation']}/{r['dtype']}/{r['n']}"] = {
                "ratio": r["flex_over_sdpa"]["ratio"], "target": TARGETS[key],
                "met": r["flex_over_sdpa"]["ratio"] <= TARGETS[key]}
    v["all_met"] = all(x["met"] for x in v.values()) if v else None
    return v


def table(result):
    """The Markdown table of a result, headed by the machine and versions."""
    m = result["machine"]
    t = m.get("torch") or {}
    lines = [f"Device: {result['device']} ({result.get('gpu') or m['cpu']}); CPU {m['cpu']} ({m['cores']} cores); "
             f"NumPy {m['numpy']}, OpenBLAS kernel {m['blas_kernel']}; PyTorch {t.get('version')} "
             f"({t.get('threads')} threads, CPU capability {t.get('cpu_capability')}); kernel {result['kernel']}; "
             f"shape (1, 4, n, 64); medians of {result['passes']} x {result['repeats']} runs; "
             f"load average {m.get('load_average')} at start, {m.get('load_average_at_end')} at end", "",
             "| activation | dtype | n | mode | flex ms | refattn.torch ms | SDPA ms | streaming ms | flex / SDPA "
             "| streaming / SDPA | flex / refattn.torch | max rel. diff. | not run |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    sdpa = {(r["dtype"], r["n"], r["mode"]): r["times"]["sdpa"]["ms"] for r in result["rows"]
            if "sdpa" in r.get("times", {})}

    def ms(r, key):
        x = r.get("times", {}).get(key)
        return "—" if x is None else f"{x['ms']:.1f}"

    def rt(x):
        return "—" if x is None else f"{x['ratio']:.2f}"

    for r in result["rows"]:
        s = sdpa.get((r["dtype"], r["n"], r["mode"]))
        diff = max(r["max_rel"].values()) if r["max_rel"] else None
        lines.append(f"| {r['activation']} | {r['dtype']} | {r['n']} | {r['mode']} | {ms(r, 'flex')} | "
                     f"{ms(r, 'refattn.torch')} | {'—' if s is None else f'{s:.1f}'} | {ms(r, 'streaming')} | "
                     f"{rt(r.get('flex_over_sdpa'))} | {rt(r.get('streaming_over_sdpa'))} | "
                     f"{rt(r.get('flex_over_refattn_torch'))} | "
                     f"{'—' if diff is None else f'{diff:.1e}'} | "
                     f"{'; '.join(f'{k}: {w}' for k, w in r['not_run'].items()) or '—'} |")
    verdict = {k: x for k, x in result["verdict"].items() if isinstance(x, dict)}
    if verdict:
        lines += ["", "Verdicts: " + ", ".join(f"{k}: {'met' if x['met'] else 'NOT met'} ({x['ratio']:.2f})"
                                               for k, x in verdict.items())]
    return "\n".join(lines)


QUICK = {"ns": [32], "passes": 1, "repeats": 1, "warmup": 0.0, "pause": 0.0}
FULL = {"ns": [1024, 4096, 16384], "passes": 3, "repeats": 3, "warmup": 0.5, "pause": 0.3}


def main(argv=None):
    ap = machine.parser(__doc__)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--kernel", choices=["compiled", "eager", "dense"],
                    help="refattn.flex's kernel (default compiled on cuda, eager on the cpu; --quick: dense)")
    ap.add_argument("--ns", type=machine.positive_int, nargs="+", help="lengths n (default 1024 4096 16384)")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"], choices=["float32", "float64"])
    ap.add_argument("--activations", nargs="+", default=list(ACTIVATIONS), choices=list(ACTIVATIONS))
    ap.add_argument("--threads", type=machine.positive_int, default=2, help="PyTorch's threads (default 2)")
    ap.add_argument("--passes", type=machine.positive_int, help="passes over the candidates (default 3)")
    ap.add_argument("--repeats", type=machine.positive_int, help="timed runs in a row per pass (default 3)")
    ap.add_argument("--warmup", type=machine.non_negative_float, help="seconds of untimed runs (default 0.5)")
    ap.add_argument("--pause", type=machine.non_negative_float, help="seconds before each candidate (default 0.3)")
    ap.add_argument("--quick", action="store_true", help="n = 32, one run each, the dense kernel: a smoke test")
    ap.add_argument("--out", type=machine.output_file, help="write the JSON here (rewritten after every row)")
    ap.add_argument("--table", metavar="JSON", help="print the table of a saved run and exit")
    args = ap.parse_args(argv)
    if args.table:
        try:
            with open(args.table, encoding="utf-8") as fh:
                print(table(json.load(fh)))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            machine.fail(ap, "--table", "a JSON file saved by --out", f"{args.table} ({type(exc).__name__})")
        return 0
    machine.fill(args, QUICK if args.quick else FULL)
    args.kernel = args.kernel or ("dense" if args.quick else "compiled" if args.device == "cuda" else "eager")
    torch = _torch(ap)
    if args.device == "cuda" and not torch.cuda.is_available():
        machine.fail(ap, "--device", "a CUDA device PyTorch can see", "cuda (none)")
    torch.set_num_threads(args.threads)
    activations = ["softmax"] + [a for a in args.activations if a != "softmax"]  # SDPA's row first
    modes = ["forward + backward"] + (["forward"] if args.device == "cpu" else [])
    result = {"command": "python " + " ".join([os.path.relpath(__file__)] + list(sys.argv[1:] if argv is None else argv)),
              "what": "refattn.flex beside SDPA, refattn.torch and streaming; scaled dot score, (1, 4, n, 64)",
              "device": args.device, "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
              "kernel": args.kernel, "passes": args.passes, "repeats": args.repeats, "warmup": args.warmup,
              "targets": TARGETS, "machine": machine.describe(torch), "rows": [], "verdict": {}, "complete": False}
    rows = []

    def save():
        if args.out:
            machine.write_json(args.out, result)

    for dtype in args.dtypes:
        for n in args.ns:
            for mode in modes:
                for name in activations:
                    row = time_row(torch, name, dtype, n, mode, args)
                    rows.append(row)
                    print(f"{name} {dtype} n={n} {mode}: " + ", ".join(
                        f"{k} {x['ms']:.1f} ms" for k, x in row.get("times", {}).items()), file=sys.stderr, flush=True)
                    result["rows"] = [{k: x for k, x in r.items() if k != "_runs"} for r in rows]
                    save()
    add_ratios(rows)
    result["rows"] = rows
    result["verdict"] = verdicts(rows, args.device)
    result["machine"]["load_average_at_end"] = list(os.getloadavg())
    result["complete"] = True
    save()
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
