"""GPU timing of attention forward + backward: refattn on CuPy against PyTorch CUDA and NumPy.

    python benchmarks/bench_gpu_attention.py                    # (B, H, n, d) = (8, 8, 1024, 64), on a GPU
    python benchmarks/bench_gpu_attention.py --size small       # CPU-only smoke run, seconds
    python benchmarks/bench_gpu_attention.py --out PATH.json    # default benchmarks/results/gpu_attention.json
    python benchmarks/bench_gpu_attention.py --table PATH.json  # print the markdown table of a saved run

For every registered activation (scaled dot-product score, no mask) and for
float32 and float64 it times one forward and backward pass,

* ``numpy``: :func:`refattn.core.attention.attention` then
  :func:`refattn.core.attention.attention_backward` on NumPy arrays (CPU);
* ``cupy``: the same two calls on CuPy arrays (GPU): the same code, which
  picks CuPy from its inputs (:func:`refattn.core.backend.array_module`);

and, once per dtype, two references, each with autograd's backward for Q,
K and V, on CUDA (on the CPU in the small runs):

* ``torch``: PyTorch eager ``softmax(Q K^T / sqrt(d)) V``, the same
  computation as refattn's, one kernel per operation;
* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention``, PyTorch's
  fused attention (on CUDA the memory-efficient kernel in float32; float64
  has no fused kernel and takes PyTorch's math route).

PyTorch has no TanhMax or SignExp, so every activation's row is compared with
PyTorch's *softmax*: the ratios say what an activation costs in refattn
against the standard attention of a standard library.

Every time is the median of ``repeats`` runs after ``warmup`` runs; on the
GPU each run is bracketed by a device synchronisation
(``cupy.cuda.Device().synchronize()``, ``torch.cuda.synchronize()``), so
it measures the work, not the launch. The upstream gradient is a fixed random
array, never all ones. All columns are measured in one process, in one run,
so their ratios are comparable; each row also records how far CuPy's results
(output and the three gradients) are from NumPy's, and the torch entry how
far PyTorch's softmax is from refattn's, since a timing of a wrong result
means nothing. Columns that cannot run (no CuPy, no GPU, no PyTorch; or a
CPU-only size) are recorded with the reason instead of a time.

The result is one JSON object (``run_attention_bench``), written to
``--out``; ``format_attention_bench`` renders it as a markdown table for
``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from refattn import ACTIVATIONS  # noqa: E402
from refattn.fast import attention, attention_backward  # noqa: E402
from refattn.core.backend import cupy_available, to_numpy  # noqa: E402

__all__ = ["SIZES", "DEFAULT_OUT", "run_attention_bench", "format_attention_bench", "main"]

SCHEMA = "refattn.attention_bench/2"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "gpu_attention.json"

#: shape (B, H, n, d); gpu: whether CuPy and PyTorch CUDA run; warm-up and
#: repeat counts on the GPU and on the CPU (NumPy at full size takes seconds
#: a run, and allocates fresh pages every run, so a warm-up buys nothing)
SIZES = {
    "full": dict(shape=(8, 8, 1024, 64), gpu=True, warmup=3, repeats=20,
                 cpu_warmup=0, cpu_repeats=2),
    "small": dict(shape=(2, 4, 128, 32), gpu=False, warmup=1, repeats=5,
                  cpu_warmup=1, cpu_repeats=5),
    "tiny": dict(shape=(1, 2, 16, 8), gpu=False, warmup=1, repeats=3,
                 cpu_warmup=1, cpu_repeats=3),
}
DTYPES = ("float32", "float64")


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------


def _times(fn, warmup, repeats, sync=None):
    """``(seconds, last)``: wall-clock times of ``repeats`` calls of ``fn`` after
    ``warmup`` calls, and the last call's result.

    ``sync`` (a device synchronisation) runs before the clock starts and
    before it stops, so that queued GPU work is inside the interval.
    """
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
    out, last = [], None
    for _ in range(repeats):
        last = None  # free the previous result before the next run allocates
        sync()
        t0 = time.perf_counter()
        last = fn()
        sync()
        out.append(time.perf_counter() - t0)
    return out, last


def _ms(seconds):
    return [1e3 * t for t in seconds]


def _max_rel(got, want):
    """Norm-wise relative difference ``max |got - want| / max |want|`` (host arrays)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    scale = float(np.max(np.abs(want)))
    diff = float(np.max(np.abs(got - want)))
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def _refattn_step(Q, K, V, G, act):
    """Forward and backward: ``(out, dQ, dK, dV)`` on the inputs' backend."""
    out, cache = attention(Q, K, V, score="scaled_dot", activation=act)
    dQ, dK, dV, _ = attention_backward(G, cache)
    return out, dQ, dK, dV


# --------------------------------------------------------------------------
# Backends: what can run here, and why not
# --------------------------------------------------------------------------


def _cupy_status(gpu):
    if not gpu:
        return None, "not run: this size is a CPU-only smoke run (use --size full on a GPU)"
    if importlib.util.find_spec("cupy") is None:
        return None, "not run: CuPy is not installed (pip install '.[gpu]' or '.[gpu-cuda13]')"
    if not cupy_available():
        return None, "not run: CuPy is installed but sees no CUDA device"
    import cupy  # noqa: PLC0415

    return cupy, None


def _torch_status(gpu):
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return None, None, "not run: PyTorch is not installed"
    if not gpu:
        return torch, "cpu", None
    if not torch.cuda.is_available():
        return torch, None, f"not run: PyTorch {torch.__version__} sees no CUDA device"
    return torch, "cuda", None


def _machine(cupy, torch, torch_device):
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
        "threads_env": {k: os.environ.get(k) for k in
                        ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
        "cupy": None, "torch": None, "gpu": None,
    }
    if cupy is not None:
        dev = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        info["cupy"] = cupy.__version__
        info["gpu"] = {
            "name": name.decode() if isinstance(name, bytes) else str(name),
            "memory_gib": round(props["totalGlobalMem"] / 2**30, 1),
            "compute_capability": dev.compute_capability,
            "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
            "cuda_driver": cupy.cuda.runtime.driverGetVersion(),
            "cupy_tf32": os.environ.get("CUPY_TF32", "0"),
        }
    if torch is not None:
        info["torch"] = torch.__version__
        info["torch_cuda"] = torch.version.cuda
        info["torch_threads"] = torch.get_num_threads()
        if torch_device == "cuda":
            info["torch_gpu"] = torch.cuda.get_device_name(0)
            info["torch_matmul_allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
    return info


# --------------------------------------------------------------------------
# The runs
# --------------------------------------------------------------------------


#: PyTorch's softmax attention, one forward + autograd backward: eager (one kernel per
#: operation, as refattn computes it) and fused (``scaled_dot_product_attention``)
TORCH_KINDS = ("torch", "sdpa")


def _torch_reference(torch, device, host, warmup, repeats, kind="torch"):
    """PyTorch softmax attention (``kind`` of :data:`TORCH_KINDS`), forward + autograd
    backward: times and results."""
    tdev = torch.device(device)
    q, k, v, g = (torch.from_numpy(x).to(tdev) for x in host)
    scale = 1.0 / float(np.sqrt(host[0].shape[-1]))
    sync = torch.cuda.synchronize if device == "cuda" else None

    def forward(qq, kk, vv):
        if kind == "sdpa":
            return torch.nn.functional.scaled_dot_product_attention(qq, kk, vv)
        w = torch.softmax((qq @ kk.transpose(-1, -2)) * scale, dim=-1)  # (B, H, n, n)
        return w @ vv  # (B, H, n, d)

    def step():
        qq, kk, vv = (t.detach().requires_grad_(True) for t in (q, k, v))
        out = forward(qq, kk, vv)
        dq, dk, dv = torch.autograd.grad(out, (qq, kk, vv), g)
        return out, dq, dk, dv

    times, last = _times(step, warmup, repeats, sync)
    res = tuple(t.detach().cpu().numpy() for t in last)
    del q, k, v, g, last
    if device == "cuda":
        torch.cuda.empty_cache()
    return times, res


def run_attention_bench(size="full", *, shape=None, dtypes=DTYPES, activations=ACTIVATIONS,
                        warmup=None, repeats=None, cpu_warmup=None, cpu_repeats=None,
                        seed=0, progress=None, checkpoint=None) -> dict:
    """Time attention forward + backward on NumPy, CuPy and PyTorch; return a JSON-able dict.

    Parameters
    ----------
    size : {"full", "small", "tiny"}
        ``full``: (8, 8, 1024, 64) with CuPy and PyTorch on CUDA; ``small``
        and ``tiny``: CPU-only smoke runs (NumPy, and PyTorch on the CPU if
        installed; CuPy recorded as not run).
    shape : tuple of 4 ints, optional
        Overrides the size's (B, H, n, d).
    dtypes, activations : sequences of str
        What to time (defaults: float32 and float64; every registered activation).
    warmup, repeats, cpu_warmup, cpu_repeats : int, optional
        Override the size's counts (GPU columns; NumPy and PyTorch-CPU columns).
    seed : int
        Seed of the random inputs (standard normal Q, K, V and upstream gradient).
    progress : callable(str), optional
        Called with one line per step (``main`` prints them to stderr).
    checkpoint : callable(dict), optional
        Called with the partial result (``"complete": False``) after every
        row, so that a run cut short still leaves its rows (``main`` writes
        them to ``--out``).

    Returns
    -------
    dict
        ``schema``, ``complete``, ``size``, ``shape``, ``dtypes``, ``activations``,
        ``timing`` (counts and what is timed), ``machine`` (versions, device),
        ``backends`` (per column: ``ran``, ``device``, ``reason`` when not run),
        ``torch_softmax`` and ``torch_sdpa`` (per dtype: ``ms``, ``times_ms``,
        ``max_rel_vs_numpy_softmax``) and ``rows``, one per (activation, dtype):
        ``numpy_ms``, ``cupy_ms``, ``torch_softmax_ms``, ``torch_sdpa_ms``
        (medians, ms, ``None`` where not run), the lists of every repeat,
        ``cupy_over_torch`` (CuPy time / PyTorch eager softmax time),
        ``cupy_over_sdpa`` (CuPy time / PyTorch fused softmax time),
        ``numpy_over_cupy`` (the GPU speed-up), ``numpy_over_torch`` and
        ``cupy_max_rel_vs_numpy`` (largest norm-wise relative difference of
        out, dQ, dK, dV).
    """
    if size not in SIZES:
        raise ValueError(f"size: expected one of {tuple(SIZES)}, got {size!r}")
    cfg = dict(SIZES[size])
    for key, val in (("warmup", warmup), ("repeats", repeats), ("cpu_warmup", cpu_warmup),
                     ("cpu_repeats", cpu_repeats)):
        if val is not None:
            if isinstance(val, bool) or not isinstance(val, int) or val < (1 if "repeats" in key else 0):
                raise ValueError(f"{key}: expected an int >= {1 if 'repeats' in key else 0}, got {val!r}")
            cfg[key] = val
    if shape is not None:
        shape = tuple(shape)
        if len(shape) != 4 or not all(isinstance(x, int) and x > 0 for x in shape):
            raise ValueError(f"shape: expected 4 positive ints (B, H, n, d), got {shape!r}")
        cfg["shape"] = shape
    unknown = [a for a in activations if a not in ACTIVATIONS]
    if unknown:
        raise ValueError(f"activations: unknown {unknown}; expected names from {ACTIVATIONS}")
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise ValueError(f"dtypes: expected a subset of {DTYPES}, got {bad}")
    say = progress or (lambda line: None)

    B, H, n, d = cfg["shape"]
    cupy, cupy_reason = _cupy_status(cfg["gpu"])
    torch_module, torch_device, torch_reason = _torch_status(cfg["gpu"])
    torch = torch_module if torch_reason is None else None  # None: the column does not run
    gpu_sync = (lambda: cupy.cuda.Device().synchronize()) if cupy is not None else None

    result = {
        "schema": SCHEMA,
        "complete": False,
        "size": size,
        "shape": {"B": B, "H": H, "n": n, "d": d},
        "dtypes": list(dtypes),
        "activations": list(activations),
        "score": "scaled_dot",
        "timing": {
            "what": "one forward + backward: refattn attention() then attention_backward() for "
                    "Q, K, V with a fixed random upstream gradient; torch: eager softmax(QK^T/sqrt(d))V "
                    "and torch.autograd.grad for Q, K, V; sdpa: the same through "
                    "torch.nn.functional.scaled_dot_product_attention",
            "statistic": "median",
            "gpu_warmup": cfg["warmup"], "gpu_repeats": cfg["repeats"],
            "cpu_warmup": cfg["cpu_warmup"], "cpu_repeats": cfg["cpu_repeats"],
            "sync": "device synchronize before starting and before stopping each timed run",
            "seed": seed,
        },
        "machine": _machine(cupy, torch_module, torch_device),
        "backends": {
            "numpy": {"ran": True, "device": "cpu"},
            "cupy": {"ran": cupy is not None, "device": "cuda" if cupy is not None else None,
                     **({"reason": cupy_reason} if cupy_reason else {})},
            "torch": {"ran": torch is not None, "device": torch_device,
                      "what": "softmax attention only (the reference for every activation)",
                      **({"reason": torch_reason} if torch_reason else {})},
        },
        "torch_softmax": {},
        "torch_sdpa": {},
        "rows": [],
    }

    rng = np.random.default_rng(seed)
    base = [rng.standard_normal((B, H, n, d)) for _ in range(4)]  # Q, K, V, upstream gradient
    for dtype in dtypes:
        host = tuple(x.astype(dtype) for x in base)
        torch_ms, t_res = {}, {}  # per kind of TORCH_KINDS: median ms, results
        if torch is not None:
            tw, tr = ((cfg["warmup"], cfg["repeats"]) if torch_device == "cuda"
                      else (cfg["cpu_warmup"], cfg["cpu_repeats"]))
            for kind in TORCH_KINDS:
                t_times, t_res[kind] = _torch_reference(torch, torch_device, host, tw, tr, kind)
                torch_ms[kind] = statistics.median(_ms(t_times))
                result[f"torch_{'softmax' if kind == 'torch' else kind}"][dtype] = {
                    "ms": torch_ms[kind], "times_ms": _ms(t_times)}
                say(f"{dtype} {kind} softmax ({torch_device}): {torch_ms[kind]:.3f} ms")
            if "softmax" not in activations:  # else compared with the softmax row's result below
                want = _refattn_step(*host, "softmax")
                for kind in TORCH_KINDS:
                    result[f"torch_{'softmax' if kind == 'torch' else kind}"][dtype][
                        "max_rel_vs_numpy_softmax"] = max(_max_rel(a, b) for a, b in zip(t_res[kind], want))
        dev = tuple(cupy.asarray(x) for x in host) if cupy is not None else None
        for act in activations:
            row = {"activation": act, "dtype": dtype}
            np_times, want = _times(lambda: _refattn_step(*host, act),
                                    cfg["cpu_warmup"], cfg["cpu_repeats"])
            if act == "softmax" and torch is not None:
                for kind in TORCH_KINDS:
                    result[f"torch_{'softmax' if kind == 'torch' else kind}"][dtype][
                        "max_rel_vs_numpy_softmax"] = max(_max_rel(a, b) for a, b in zip(t_res[kind], want))
            row["numpy_ms"] = statistics.median(_ms(np_times))
            row["numpy_times_ms"] = _ms(np_times)
            row["cupy_ms"] = row["cupy_times_ms"] = row["cupy_max_rel_vs_numpy"] = None
            if cupy is not None:
                c_times, got = _times(lambda: _refattn_step(*dev, act),
                                      cfg["warmup"], cfg["repeats"], gpu_sync)
                row["cupy_ms"] = statistics.median(_ms(c_times))
                row["cupy_times_ms"] = _ms(c_times)
                row["cupy_max_rel_vs_numpy"] = max(_max_rel(to_numpy(a), b) for a, b in zip(got, want))
                del got
                cupy.get_default_memory_pool().free_all_blocks()
            row["torch_softmax_ms"] = t_ms = torch_ms.get("torch")
            row["torch_sdpa_ms"] = s_ms = torch_ms.get("sdpa")
            row["cupy_over_torch"] = row["cupy_ms"] / t_ms if row["cupy_ms"] is not None and t_ms else None
            row["cupy_over_sdpa"] = row["cupy_ms"] / s_ms if row["cupy_ms"] is not None and s_ms else None
            row["numpy_over_cupy"] = (row["numpy_ms"] / row["cupy_ms"]
                                      if row["cupy_ms"] else None)
            row["numpy_over_torch"] = row["numpy_ms"] / t_ms if t_ms else None
            del want
            result["rows"].append(row)
            if checkpoint is not None:
                checkpoint(result)
            say(f"{dtype} {act}: numpy {row['numpy_ms']:.3f} ms"
                + (f", cupy {row['cupy_ms']:.3f} ms" if row["cupy_ms"] is not None else ""))
        del dev
    result["complete"] = True
    return result


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------


def _fmt(x, spec):
    return "—" if x is None else format(x, spec)


def _fmt_ms(x):
    """Milliseconds with 3 significant digits, never in exponent form."""
    if x is None:
        return "—"
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def format_attention_bench(result) -> str:
    """A markdown table: one row per (activation, dtype), times in ms and the ratios."""
    shape = result["shape"]
    be = result["backends"]
    tdev = be["torch"].get("device") or "n/a"
    gpu = (result["machine"].get("gpu") or {}).get("name")
    lines = [
        f"Attention forward + backward, (B, H, n, d) = ({shape['B']}, {shape['H']}, {shape['n']}, "
        f"{shape['d']}), scaled dot-product scores, median of "
        f"{result['timing']['gpu_repeats']} (GPU) / {result['timing']['cpu_repeats']} (CPU) runs"
        + (f"; GPU: {gpu}" if gpu else ""),
        "",
        f"| activation | dtype | NumPy CPU ms | CuPy ms | torch {tdev} eager softmax ms "
        f"| torch {tdev} SDPA ms | CuPy / eager | CuPy / SDPA | NumPy / CuPy | CuPy vs NumPy (max rel) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['activation']} | {r['dtype']} | {_fmt_ms(r['numpy_ms'])} | "
            f"{_fmt_ms(r['cupy_ms'])} | {_fmt_ms(r['torch_softmax_ms'])} | {_fmt_ms(r.get('torch_sdpa_ms'))} | "
            f"{_fmt(r['cupy_over_torch'], '.2f')} | {_fmt(r.get('cupy_over_sdpa'), '.2f')} | "
            f"{_fmt(r['numpy_over_cupy'], '.1f')} | "
            f"{_fmt(r['cupy_max_rel_vs_numpy'], '.1e')} |"
        )
    notes = [f"{name}: {b['reason']}" for name, b in be.items() if not b["ran"]]
    if not result.get("complete", True):
        notes.insert(0, f"INCOMPLETE run: {len(result['rows'])} of "
                        f"{len(result['activations']) * len(result['dtypes'])} rows")
    for key, label in (("torch_softmax", "eager softmax"), ("torch_sdpa", "SDPA")):
        for dtype, t in result.get(key, {}).items():
            notes.append(f"torch {label} {dtype} vs refattn softmax (NumPy): max rel difference "
                         f"{t['max_rel_vs_numpy_softmax']:.1e}")
    if notes:
        lines += [""] + [f"- {x}" for x in notes]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=tuple(SIZES), default="full",
                    help="full: (8, 8, 1024, 64) on the GPU; small, tiny: CPU-only smoke runs")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON path (default {DEFAULT_OUT})")
    ap.add_argument("--shape", type=int, nargs=4, metavar=("B", "H", "n", "d"), default=None)
    ap.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    ap.add_argument("--activations", nargs="+", choices=ACTIVATIONS, default=list(ACTIVATIONS))
    ap.add_argument("--repeats", type=int, default=None, help="GPU repeats")
    ap.add_argument("--cpu-repeats", type=int, default=None, help="NumPy (and torch CPU) repeats")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--table", type=Path, default=None, metavar="JSON",
                    help="print the markdown table of a saved run and exit (runs nothing)")
    args = ap.parse_args(argv)
    if args.table is not None:
        result = json.loads(args.table.read_text())
        print(format_attention_bench(result))
        return result
    t0 = time.perf_counter()
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def write(result):
        result["wall_s"] = time.perf_counter() - t0
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        tmp.replace(args.out)  # atomic: a reader never sees half a file

    result = run_attention_bench(args.size, shape=args.shape, dtypes=args.dtypes,
                                 activations=args.activations, repeats=args.repeats,
                                 cpu_repeats=args.cpu_repeats, seed=args.seed,
                                 progress=lambda line: print(line, file=sys.stderr, flush=True),
                                 checkpoint=write)
    write(result)
    print(format_attention_bench(result))
    print(f"\nwrote {args.out} ({result['wall_s']:.1f} s)")
    return result


if __name__ == "__main__":
    main()
