"""The steps of ``benchmarks/gpu_check.sh``: the machine, streaming beside SDPA, NT on two devices, the report.

    python benchmarks/gpu_check.py machine   --out PART.json
    python benchmarks/gpu_check.py streaming --out PART.json [--quick]
    python benchmarks/gpu_check.py nt        --out PART.json [--quick]
    python benchmarks/gpu_check.py assemble  --work DIR --out gpu_check.json
    python benchmarks/gpu_check.py table     gpu_check.json

``gpu_check.sh`` runs each measuring step in its own process under its own
time limit, so that a step that fails, hangs or runs out of time costs only
its own part; ``assemble`` then gathers every part (and the parity tests'
JUnit XML) into one JSON, marking what did not run and why. Each step runs
on whatever it finds: with CuPy and a CUDA device it measures the GPU; without
one it records ``"no device"`` for every GPU column and, so that the logic is
exercised end to end, runs the CPU side at smoke sizes.

* ``streaming``: :func:`refattn.fast.streaming.streaming_attention` and its
  backward on CuPy (the reading loop, one ``block_size`` per run) beside
  ``torch.nn.functional.scaled_dot_product_attention`` with autograd on CUDA,
  softmax, shape (1, 4, n, 64), n = 16,384 and 65,536, float32 and float64;
  the block size is chosen at the smallest n from :data:`BLOCK_SIZES` and kept.
* ``nt``: ``refattn nt`` (Expressive's Fig. 3 setting, 16 seeds batched, 200
  epochs) on ``--device gpu`` and ``--device cpu``, each in a fresh process,
  and how far the two runs' accuracy curves are apart.

The steps ``flex_tests`` (``tests/core/test_flex.py``'s CUDA tests, whose JUnit XML
``assemble`` counts as it counts the parity tests') and ``flex``
(``benchmarks/bench_flex.py``, whose verdicts become the FlexAttention targets)
are commands of ``gpu_check.sh`` itself.

The top of this file imports only the standard library: ``machine`` and
``assemble`` must work where refattn's own dependencies failed to install.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = "refattn.gpu_check/1"

#: (B, H, d) of the streaming runs; lengths on a GPU and at smoke size
STREAM_SHAPE = (1, 4, 64)
STREAM_LENGTHS = {"gpu": (16384, 65536), "smoke": (256, 512)}
#: block sizes tried at the smallest length (queries and keys per block of the reading loop)
BLOCK_SIZES = {"gpu": (512, 1024, 2048, 4096), "smoke": (64, 128)}
#: warm-up and timed runs per streaming and SDPA measurement
STREAM_RUNS = {"gpu": (1, 3), "smoke": (1, 2)}
#: refattn nt: epochs and seeds (issue's setting, and the smoke run's)
NT_RUNS = {"gpu": dict(epochs=200, seeds=16), "smoke": dict(epochs=2, seeds=2)}
#: the parts gpu_check.sh makes, in the order it runs them
STEPS = ("setup", "machine", "parity", "dense", "streaming", "nt", "flex_tests", "flex")
#: the steps whose result is a test run's JUnit XML (``STEP.xml``), counted by :func:`parity_summary`
TEST_STEPS = ("parity", "flex_tests")
#: the targets of the GPU check, as the JSON states them
TARGETS = {"cupy_over_torch_eager_max": 2.0, "numpy_over_cupy_min": 10.0, "streaming_over_sdpa_max": 4.0}


def _say(line):
    print(line, file=sys.stderr, flush=True)


def _write(path, obj):
    """``obj`` as JSON at ``path``, through a temporary file moved over it (whole or not at all)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------
# The devices: CuPy on a CUDA device, PyTorch on CUDA, or why not
# --------------------------------------------------------------------------


def gpu_backends():
    """``(cupy, torch, reason)``: CuPy and PyTorch when both see a CUDA device, else
    ``(None, torch or None, reason)`` with ``reason`` starting ``"no device"``."""
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        torch = None
    from refattn.core.backend import cupy_available  # noqa: PLC0415

    if not cupy_available():
        return None, torch, "no device: CuPy is not installed or sees no CUDA device"
    if torch is None or not torch.cuda.is_available():
        return None, torch, "no device: PyTorch is not installed or sees no CUDA device"
    import cupy  # noqa: PLC0415

    return cupy, torch, None


def _free(cupy, torch):
    if cupy is not None:
        cupy.get_default_memory_pool().free_all_blocks()
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------
# machine
# --------------------------------------------------------------------------


def _nvidia_smi():
    """The GPU, driver and CUDA version as ``nvidia-smi`` reports them, or why not."""
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        head = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"reason": f"nvidia-smi did not run: {exc}"}
    if q.returncode != 0:
        return {"reason": f"nvidia-smi failed: {(q.stderr or q.stdout).strip()[:200]}"}
    gpus = [dict(zip(("name", "driver", "memory"), (x.strip() for x in line.split(","))))
            for line in q.stdout.strip().splitlines()]
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", head.stdout)
    return {"gpus": gpus, "driver_cuda": cuda.group(1) if cuda else None}


def machine():
    """The host, the GPU, and the versions of everything the check uses."""
    info = {"python": platform.python_version(), "platform": platform.platform(), "cores": os.cpu_count(),
            "versions": {d: _version(d) for d in ("numpy", "autograd", "cupy-cuda13x", "cupy-cuda12x",
                                                  "torch", "jax", "pytest", "hypothesis", "matplotlib",
                                                  "threadpoolctl")},
            "nvidia_smi": _nvidia_smi()}
    try:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import machine as host  # noqa: PLC0415

        info["cpu"] = host.cpu_model()
        info["blas_kernel"] = host.blas_kernel()
    except ImportError as exc:  # NumPy or threadpoolctl missing: the report says so
        info["cpu_reason"] = f"not read: {exc}"
    # the commit as told (GIT_COMMIT): a copy of a working tree may carry a .git whose HEAD is not what runs
    info["git_commit"] = os.environ.get("GIT_COMMIT")
    if not info["git_commit"]:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                    timeout=10)
            info["git_commit"] = commit.stdout.strip() if commit.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            info["git_commit"] = None
    try:
        cupy, torch, reason = gpu_backends()
    except ImportError as exc:
        cupy, torch, reason = None, None, f"no device: refattn does not import ({exc})"
    info["gpu_reason"] = reason
    if cupy is not None:
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"]
        info["cupy"] = {"version": cupy.__version__, "device": name.decode() if isinstance(name, bytes) else name,
                        "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
                        "cuda_driver": cupy.cuda.runtime.driverGetVersion(),
                        "compute_capability": cupy.cuda.Device().compute_capability}
    if torch is not None:
        info["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                         "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    return info


# --------------------------------------------------------------------------
# streaming beside SDPA
# --------------------------------------------------------------------------


def _bench():
    """``benchmarks/bench_gpu_attention.py``, whose timing and comparison this step shares."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_gpu_attention  # noqa: PLC0415

    return bench_gpu_attention


def _max_rel(got, want):
    """Largest norm-wise relative difference over pairs of host arrays (:func:`bench_gpu_attention._max_rel`)."""
    return max(_bench()._max_rel(a, b) for a, b in zip(got, want))


def streaming_vs_sdpa(xp, sync, torch, tdev, lengths, dtypes, block_sizes, runs, seed=0, say=_say):
    """Time streaming attention on ``xp`` beside PyTorch's SDPA on ``tdev``; one dict per (dtype, n).

    Parameters
    ----------
    xp : module
        The array module the streaming runs on (``cupy``; ``numpy`` at smoke size, or the tests'
        fake device): inputs are copied to it with ``xp.asarray``.
    sync : callable
        A device synchronisation, called before starting and before stopping every timed run.
    torch, tdev : module or None, str
        PyTorch and its device (``"cuda"``, ``"cpu"``); ``torch=None``: no SDPA column.
    lengths, dtypes, block_sizes : sequences
        Sequence lengths n; ``"float32"``/``"float64"``; the block sizes tried at ``min(lengths)``
        (the fastest is kept for the longer lengths of that dtype).
    runs : (int, int)
        Warm-up and timed runs per measurement.
    """
    import numpy as np  # noqa: PLC0415

    from refattn.core.backend import to_numpy  # noqa: PLC0415
    from refattn.fast.streaming import streaming_attention, streaming_attention_backward  # noqa: PLC0415

    B, H, d = STREAM_SHAPE
    warmup, repeats = runs
    rows = []
    for dtype in dtypes:
        best = None
        for n in sorted(lengths):
            rng = np.random.default_rng(seed)
            host = [rng.standard_normal((B, H, n, d)).astype(dtype) for _ in range(4)]  # Q, K, V, dY
            dev = [xp.asarray(a) for a in host]
            row = {"dtype": dtype, "n": n, "shape": [B, H, n, d], "streaming": {}}
            tried = block_sizes if best is None else (best,)
            results = {}
            for b in tried:
                def step(b=b):
                    out, cache = streaming_attention(*dev[:3], activation="softmax", block_size=b)
                    return (out,) + tuple(streaming_attention_backward(dev[3], cache)[:3])

                times, last = _bench()._times(step, warmup, repeats, sync)
                results[b] = tuple(to_numpy(a) for a in last)
                del last
                row["streaming"][str(b)] = {"ms": 1e3 * statistics.median(times),
                                            "times_ms": [1e3 * t for t in times]}
                say(f"streaming {dtype} n={n} block={b}: {row['streaming'][str(b)]['ms']:.1f} ms")
            if best is None:
                best = min(tried, key=lambda b: row["streaming"][str(b)]["ms"])
            row["block_size"] = best
            row["streaming_ms"] = row["streaming"][str(best)]["ms"]
            row["sdpa_ms"] = row["streaming_over_sdpa"] = row["max_rel_vs_sdpa"] = None
            del dev
            if torch is None:
                row["sdpa_reason"] = "not run: PyTorch is not installed"
            else:
                row.update(_sdpa(torch, tdev, host, warmup, repeats, results[best]))
                if row["sdpa_ms"]:
                    row["streaming_over_sdpa"] = row["streaming_ms"] / row["sdpa_ms"]
                    say(f"sdpa {dtype} n={n}: {row['sdpa_ms']:.1f} ms; streaming / sdpa "
                        f"{row['streaming_over_sdpa']:.2f}, max rel {row['max_rel_vs_sdpa']:.1e}")
                else:
                    say(f"sdpa {dtype} n={n}: {row['sdpa_reason']}")
            rows.append(row)
            del results, host
            _free(xp if xp.__name__ == "cupy" else None, torch)
    return rows


def _sdpa(torch, tdev, host, warmup, repeats, want):
    """SDPA forward + autograd backward on ``tdev``: its time and its distance from streaming's ``want``."""
    sync = torch.cuda.synchronize if tdev == "cuda" else (lambda: None)
    try:
        q, k, v, g = (torch.from_numpy(a).to(tdev) for a in host)

        def step():
            qq, kk, vv = (t.detach().requires_grad_(True) for t in (q, k, v))
            out = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv)
            return (out,) + torch.autograd.grad(out, (qq, kk, vv), g)

        times, last = _bench()._times(step, warmup, repeats, sync)
        got = tuple(t.detach().cpu().numpy() for t in last)
    except torch.cuda.OutOfMemoryError as exc:
        first = str(exc).splitlines()[0][:200]
        return {"sdpa_reason": f"not run: out of GPU memory ({first})"}
    finally:
        q = k = v = g = last = None  # noqa: F841
        if tdev == "cuda":
            torch.cuda.empty_cache()
    return {"sdpa_ms": 1e3 * statistics.median(times), "sdpa_times_ms": [1e3 * t for t in times],
            "max_rel_vs_sdpa": _max_rel(want, got)}


def streaming(quick):
    cupy, torch, reason = gpu_backends()
    if cupy is None:
        import numpy as np  # noqa: PLC0415

        size = "smoke"
        xp, sync, tdev = np, (lambda: None), "cpu"
    else:
        size = "gpu"
        xp, sync, tdev = cupy, (lambda: cupy.cuda.Device().synchronize()), "cuda"
    if quick:
        size = "smoke"
    return {"size": size, "device": "cuda" if cupy is not None else "cpu",
            "gpu_reason": reason, "shape_b_h_d": list(STREAM_SHAPE), "activation": "softmax",
            "score": "scaled_dot", "runs": {"warmup": STREAM_RUNS[size][0], "repeats": STREAM_RUNS[size][1],
                                            "statistic": "median"},
            "what": "streaming_attention + streaming_attention_backward (reading loop on CuPy) against "
                    "torch.nn.functional.scaled_dot_product_attention + torch.autograd.grad, the same inputs",
            "rows": streaming_vs_sdpa(xp, sync, torch, tdev, STREAM_LENGTHS[size], ("float32", "float64"),
                                      BLOCK_SIZES[size], STREAM_RUNS[size])}


# --------------------------------------------------------------------------
# refattn nt on two devices
# --------------------------------------------------------------------------


def _nt_run(device, epochs, seeds, limit):
    """``refattn nt`` in a fresh process on ``device``: its JSON, wall time, or why it failed."""
    cmd = [sys.executable, "-m", "refattn", "nt", "--epochs", str(epochs), "--seeds", str(seeds),
           "--device", device, "--json"]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return {"command": " ".join(cmd[1:]), "reason": f"timed out after {limit} s"}
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        return {"command": " ".join(cmd[1:]), "reason": f"exit {done.returncode}: {done.stderr.strip()[-400:]}"}
    res = json.loads(done.stdout)
    keep = ("device", "dtype", "task", "n_con", "attention", "seeds", "epochs", "seconds", "seconds_per_epoch",
            "train_seconds_per_epoch", "eval_seconds", "reached_100", "median_epochs_to_100",
            "mean_final_accuracy", "final_accuracy", "accuracy")
    return {"command": "refattn " + " ".join(cmd[3:]), "wall_s": wall, **{k: res.get(k) for k in keep}}


def nt(quick, limit=240, checkpoint=None):
    """``refattn nt`` on the GPU, then on the CPU, each in a fresh process (at most ``limit`` s);
    ``checkpoint(result)`` after each run, so that a step cut short keeps the run it finished."""
    cupy, _, reason = gpu_backends()
    size = "smoke" if quick or cupy is None else "gpu"
    cfg = NT_RUNS[size]
    out = {"size": size, **cfg, "runs": {}}
    save = checkpoint or (lambda result: None)
    out["runs"]["gpu"] = {"reason": reason} if cupy is None else _nt_run("gpu", cfg["epochs"], cfg["seeds"], limit)
    save(out)
    out["runs"]["cpu"] = _nt_run("cpu", cfg["epochs"], cfg["seeds"], limit)
    g, c = out["runs"]["gpu"], out["runs"]["cpu"]
    for name, r in (("gpu", g), ("cpu", c)):
        _say(f"nt {name}: " + (f"{r['seconds']:.1f} s, {1e3 * r['train_seconds_per_epoch']:.2f} ms per training "
                               f"epoch" if "seconds" in r else r["reason"]))
    if "seconds" in g and "seconds" in c:
        out["cpu_over_gpu_seconds"] = c["seconds"] / g["seconds"]
        out["cpu_over_gpu_train_epoch"] = c["train_seconds_per_epoch"] / g["train_seconds_per_epoch"]
        pairs = [(a, b) for ra, rb in zip(g["accuracy"], c["accuracy"]) for a, b in zip(ra, rb)]
        out["max_accuracy_difference"] = max(abs(a - b) for a, b in pairs)
        out["same_epochs_to_100"] = g["median_epochs_to_100"] == c["median_epochs_to_100"]
    save(out)
    return out


# --------------------------------------------------------------------------
# assemble: one JSON from the parts
# --------------------------------------------------------------------------


def parity_summary(xml_path):
    """Counts of the parity tests per backend (``numpy``, ``fake_device``, ``cupy``) from JUnit XML."""
    root = ET.parse(xml_path).getroot()
    counts = {}
    for case in root.iter("testcase"):
        name = case.get("name", "")
        backend = next((b for b in ("fake_device", "cupy", "numpy") if re.search(rf"[\[-]{b}[\]-]", name)), "other")
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        c = counts.setdefault(backend, {"passed": 0, "failed": 0, "skipped": 0})
        c[outcome] += 1
    failed = [case.get("name") for case in root.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    total = {k: sum(c[k] for c in counts.values()) for k in ("passed", "failed", "skipped")}
    return {"summary": ", ".join(f"{v} {k}" for k, v in total.items()), "per_backend": counts, "failed": failed[:50]}


def _load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        return {"reason": f"no result: {type(exc).__name__}: {exc}"[:300]}


def _verdicts(report):
    """Each target of :data:`TARGETS` against what was measured: met, missed, or not measured."""
    dense = report["steps"].get("dense", {}).get("result") or {}
    rows = [r for r in dense.get("rows", []) if r.get("cupy_ms") is not None]
    out = {}
    if rows:
        worst_torch = max(r["cupy_over_torch"] for r in rows if r["cupy_over_torch"] is not None)
        least_speedup = min(r["numpy_over_cupy"] for r in rows)
        out["cupy_over_torch_eager"] = {"worst": worst_torch, "target": TARGETS["cupy_over_torch_eager_max"],
                                        "met": worst_torch <= TARGETS["cupy_over_torch_eager_max"]}
        out["numpy_over_cupy"] = {"least": least_speedup, "target": TARGETS["numpy_over_cupy_min"],
                                  "met": least_speedup >= TARGETS["numpy_over_cupy_min"]}
    stream = report["steps"].get("streaming", {}).get("result") or {}
    ratios = [r["streaming_over_sdpa"] for r in stream.get("rows", []) if r.get("streaming_over_sdpa")]
    if stream.get("device") == "cuda" and ratios:
        out["streaming_over_sdpa"] = {"worst": max(ratios), "target": TARGETS["streaming_over_sdpa_max"],
                                      "met": max(ratios) <= TARGETS["streaming_over_sdpa_max"]}
    flex = report["steps"].get("flex", {}).get("result") or {}
    if flex.get("device") == "cuda":  # benchmarks/bench_flex.py's verdicts, per activation, dtype and n
        for key in ("flex_over_sdpa_rho_one", "flex_over_sdpa_signed"):
            got = {k: v for k, v in (flex.get("verdict") or {}).items() if k.startswith(key + "/")}
            if got:
                worst = max(got, key=lambda k: got[k]["ratio"])
                out[key] = {"worst": got[worst]["ratio"], "where": worst.split("/", 1)[1],
                            "target": got[worst]["target"], "met": all(v["met"] for v in got.values())}
    for key in ("cupy_over_torch_eager", "numpy_over_cupy", "streaming_over_sdpa", "flex_over_sdpa_rho_one",
                "flex_over_sdpa_signed"):
        out.setdefault(key, {"met": None, "reason": "not measured on a GPU"})
    return out


def assemble(work, limit):
    """One report from the parts in ``work``: each step's status, result (or why none) and the targets."""
    work = Path(work)
    report = {"schema": SCHEMA, "limit_s": limit, "steps": {}}
    for step in STEPS:
        status = _load(work / f"{step}.status.json")
        entry = {"status": status.get("status", "not run: no status (the script stopped before this step)"),
                 "exit": status.get("exit"), "seconds": status.get("seconds")}
        if step in TEST_STEPS:
            xml = work / f"{step}.xml"
            entry["result"] = parity_summary(xml) if xml.exists() else {"reason": "no JUnit XML"}
        elif step != "setup":  # setup has a status only
            entry["result"] = _load(work / f"{step}.json")
        report["steps"][step] = entry
    m = report["steps"]["machine"]["result"]
    report["device"] = ((m.get("cupy") or {}).get("device") or "no device")
    report["gpu_reason"] = m.get("gpu_reason")
    cupy_counts = (report["steps"]["parity"]["result"].get("per_backend") or {}).get("cupy")
    report["parity_on_gpu"] = ("no device" if m.get("gpu_reason") else
                               "passed" if cupy_counts and cupy_counts["failed"] == 0 and not cupy_counts["skipped"]
                               else "FAILED or incomplete")
    report["targets"] = _verdicts(report)
    return report


def format_streaming(stream):
    """The streaming part as a Markdown table, with the reasons for what did not run."""
    lines = [f"Streaming attention (softmax, shape (1, 4, n, 64), {stream['device']}) beside SDPA, forward + "
             f"backward, median of {stream['runs']['repeats']} runs after {stream['runs']['warmup']}:", "",
             "| dtype | n | block | streaming ms | SDPA ms | streaming / SDPA | max rel |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in stream["rows"]:
        sd = "—" if r["sdpa_ms"] is None else f"{r['sdpa_ms']:.1f}"
        ratio = "—" if r["streaming_over_sdpa"] is None else f"{r['streaming_over_sdpa']:.2f}"
        rel = "—" if r["max_rel_vs_sdpa"] is None else f"{r['max_rel_vs_sdpa']:.1e}"
        lines.append(f"| {r['dtype']} | {r['n']} | {r['block_size']} | {r['streaming_ms']:.1f} | {sd} | {ratio} "
                     f"| {rel} |")
    notes = [f"- {r['dtype']}, n = {r['n']}: SDPA {r['sdpa_reason'].split(' (')[0]}"
             for r in stream["rows"] if r.get("sdpa_reason")]
    return "\n".join(lines + ([""] + notes if notes else []))


def format_nt(ntr):
    """The NT part: each device's times and how far the two runs' accuracies are apart."""
    ran = next((r for r in ntr["runs"].values() if "task" in r), None)
    what = f" ({ran['task']}, N_con = {ran['n_con']}, {ran['attention']}, {ran['dtype']})" if ran else ""
    lines = [f"refattn nt{what}, {ntr.get('epochs')} epochs, {ntr.get('seeds')} seeds batched:", ""]
    for dev, r in ntr["runs"].items():
        lines.append(f"- {dev}: " + (f"{r['seconds']:.1f} s in all, {1e3 * r['train_seconds_per_epoch']:.1f} ms per "
                                     f"training epoch, evaluations {r['eval_seconds']:.1f} s"
                                     if "seconds" in r else r["reason"]))
    if "max_accuracy_difference" in ntr:
        lines.append(f"- largest difference of a test accuracy, GPU against CPU, over every seed and evaluation: "
                     f"{ntr['max_accuracy_difference']:.3g}")
    return "\n".join(lines)


def format_report(report):
    """The report as Markdown: the steps, the dense table, streaming, NT, the targets."""
    lines = [f"GPU check on {report['device']}" + (f" ({report['gpu_reason']})" if report.get("gpu_reason") else ""),
             "", "| step | status | seconds |", "|---|---|---:|"]
    for step, e in report["steps"].items():
        secs = e.get("seconds")
        lines.append(f"| {step} | {e['status']} | {'—' if secs is None else secs} |")
    p = report["steps"]["parity"]["result"]
    lines += ["", f"Parity tests: {p.get('summary') or p.get('reason')}; on the GPU: {report['parity_on_gpu']}; "
                  f"per backend: {json.dumps(p.get('per_backend', {}))}"]
    dense = report["steps"]["dense"]["result"]
    if dense.get("rows"):
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from bench_gpu_attention import format_attention_bench  # noqa: PLC0415

        lines += ["", format_attention_bench(dense)]
    stream = report["steps"]["streaming"]["result"]
    if stream.get("rows"):
        lines += ["", format_streaming(stream)]
    ntr = report["steps"]["nt"]["result"]
    if ntr.get("runs"):
        lines += ["", format_nt(ntr)]
    ft = report["steps"].get("flex_tests", {}).get("result") or {}
    lines += ["", f"FlexAttention tests: {ft.get('summary') or ft.get('reason')}"]
    flex = report["steps"].get("flex", {}).get("result") or {}
    if flex.get("rows"):
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from bench_flex import table as format_flex  # noqa: PLC0415

        lines += ["", format_flex(flex)]
    lines += ["", "Targets:"] + [f"- {k}: {json.dumps(v)}" for k, v in report["targets"].items()]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="step", required=True)
    for name in ("machine", "streaming", "nt"):
        s = sub.add_parser(name)
        s.add_argument("--out", type=Path, required=True)
        s.add_argument("--quick", action="store_true", help="smoke sizes even on a GPU")
    a = sub.add_parser("assemble")
    a.add_argument("--work", type=Path, required=True)
    a.add_argument("--out", type=Path, required=True)
    a.add_argument("--limit", type=int, default=None)
    t = sub.add_parser("table")
    t.add_argument("json", type=Path)
    args = ap.parse_args(argv)
    if args.step == "table":
        print(format_report(json.loads(args.json.read_text())))
        return 0
    if args.step == "assemble":
        report = assemble(args.work, args.limit)
        _write(args.out, report)
        print(format_report(report))
        return 0
    sys.path.insert(0, str(ROOT))
    if args.step == "machine":
        _write(args.out, machine())
    elif args.step == "streaming":
        _write(args.out, streaming(args.quick))
    else:
        nt(args.quick, checkpoint=lambda result: _write(args.out, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
