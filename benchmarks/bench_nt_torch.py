"""Milliseconds per epoch of Expressive's NT training at steady state: ``refattn nt`` against the same model in
plain PyTorch, float64 and float32, per BLAS kernel.

The PyTorch program (:class:`NTTorch`, here only: a comparison, not part of the
package) is the model of ``refattn.training.models.nt`` as a PyTorch user
writes it: the same layout (one-hot embedding, pre-LN causal attention whose
position ``m`` has its own query, key and value matrices, a query bias per
position, pre-LN tanh feed-forward of width 4d per position, the readout of
all positions with a shared bias, the squared error against the one-hot next
symbol), expressive attention as Expressive's Eq. 2 reads in code
(``z^2 / (1 + z^2)``, the future masked, divided by the row sum), the 16 seeds
batched on a leading axis as refattn batches them, the initial values of
``NTModel.init_params`` (uniform in ``1/sqrt(fan_in)``, biases 0),
``torch.optim.SGD`` with Expressive's learning rate 0.02 and momentum 0.8,
autograd for the gradient, and the same batches (``make_batches``: one fresh
NT series per seed and epoch). Before timing, one float64 step of both is
compared: loss and every gradient must agree to 1e-10 (the JSON records by
how much), so the two time the same computation.

Fig. 3's setting (N16T2, N_con = 32, 16 seeds), ``--epochs`` epochs per
process, each program in a fresh process, in interleaved passes so that
the ratios are measured under one load: refattn as the command line runs it
(``benchmarks/bench_nt.py``'s measurement: ``refattn nt``, its threads), and
PyTorch on its default threads (``--threads N`` gives both N threads, for a
machine where other work runs: an idle thread of PyTorch's OpenMP pool spins,
so a loaded machine slows it far more than refattn's pool). The time per
epoch is the median over the
epochs after the first ``--skip``; the ratio refattn / PyTorch is taken per
pass, and its median reported with the smallest and largest (target: at most
1); the same for the CPU time per epoch of each process (all its threads),
which the other work of a shared machine disturbs less. Each kernel of ``--kernels`` sets ``OPENBLAS_CORETYPE`` for both
processes (it moves NumPy's OpenBLAS; PyTorch brings its own BLAS, recorded
in the JSON with its version and threads).

    python benchmarks/bench_nt_torch.py --out benchmarks/results/nt_torch.json
    python benchmarks/bench_nt_torch.py --quick          # a look in a few seconds

Needs PyTorch (the ``bench`` extra). Not part of the test run; nothing here
asserts a time.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import machine  # noqa: E402
from bench_nt import measure, steady, timing_options  # noqa: E402  (refattn nt in a fresh process, its stamps)
from refattn.studies.nt_training import PAPER, make_batches  # noqa: E402
from refattn.training.models.nt import HIDDEN_FACTOR, NTModel  # noqa: E402

DTYPES = ("float64", "float32")


def _torch():
    import torch  # noqa: PLC0415  (the bench extra)

    return torch


class NTTorch:
    """Expressive's NT model in plain PyTorch (see the module's docstring), batched over seeds.

    ``params`` are ``NTModel(N, n_con, "expressive").init_params(seeds, dtype)``
    (layout ``b_Q+b_r``): they become ``torch.nn.Parameter`` s, and
    :meth:`loss` is the summed per-seed loss of a batch.
    """

    def __init__(self, params, N, activation="expressive", ln_eps=1e-5):
        torch = _torch()
        self.torch, self.N, self.activation, self.ln_eps = torch, N, activation, ln_eps
        self.p = {k: torch.nn.Parameter(torch.from_numpy(np.array(v))) for k, v in params.items()}

    def parameters(self):
        return list(self.p.values())

    def loss(self, context, target):
        torch, p, d = self.torch, self.p, self.N
        F = torch.nn.functional
        S, B, n = context.shape
        X = F.one_hot(context, d).to(p["W_Q"].dtype)  # (S, B, n, d)
        Z1 = F.layer_norm(X, (d,), eps=self.ln_eps)
        Q = torch.einsum("snoi,sbni->sbno", p["W_Q"], Z1) + p["b_Q"][:, None]  # position m's own matrices
        K = torch.einsum("snoi,sbni->sbno", p["W_K"], Z1)
        V = torch.einsum("snoi,sbni->sbno", p["W_V"], Z1)
        z = Q @ K.transpose(-1, -2)  # (S, B, n, n), beta = 1
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        if self.activation == "expressive":  # Expressive's Eq. 2
            h = (z * z / (1 + z * z)).masked_fill(future, 0.0)
            A = h / h.sum(-1, keepdim=True)
        else:  # Eq. 1, dot-product attention
            A = torch.softmax(z.masked_fill(future, float("-inf")), dim=-1)
        H = X + A @ V
        Z2 = F.layer_norm(H, (d,), eps=self.ln_eps)
        T = torch.tanh(torch.einsum("snoi,sbni->sbno", p["W_1"], Z2))
        G = H + torch.einsum("snoi,sbni->sbno", p["W_2"], T)
        y = G.reshape(S, B, n * d) @ p["W_r"].transpose(-1, -2) + p["b_r"][:, None]  # (S, B, d)
        err = y - F.one_hot(target, d).to(y.dtype)
        return (err * err).mean(dim=(1, 2)).sum()  # the per-seed losses, summed: each seed's gradient is its own


def agreement(N=16, n_con=32, seeds=4):
    """One float64 step of refattn's model and of :class:`NTTorch` from the same parameters and batch: the
    largest relative difference of the loss and of each gradient."""
    torch = _torch()
    model = NTModel(N, n_con, activation="expressive")
    params = model.init_params(list(range(seeds)))
    batch = make_batches(f"N{N}T2", n_con, list(range(seeds)))(0)[0]
    loss, grads, _ = model.loss_and_grad(params, batch)
    tm = NTTorch(params, N)
    t_loss = tm.loss(torch.from_numpy(batch["context"]), torch.from_numpy(batch["target"]))
    t_loss.backward()
    t_loss = t_loss.detach()
    out = {"loss": abs(t_loss.item() - float(loss.sum())) / abs(float(loss.sum()))}
    for k, g in grads.items():
        out[k] = float(np.max(np.abs(tm.p[k].grad.numpy() - g)) / np.max(np.abs(g)))
    return out


def child(dtype, task, n_con, seeds, epochs):
    """Train :class:`NTTorch` for ``epochs`` epochs; print the end time of every epoch as JSON."""
    torch = _torch()
    N = int(task[1:].split("T")[0])
    seeds = list(range(seeds))
    tm = NTTorch(NTModel(N, n_con, activation="expressive").init_params(seeds, np.dtype(dtype)), N)
    opt = torch.optim.SGD(tm.parameters(), lr=PAPER["lr"], momentum=PAPER["momentum"])
    batches = make_batches(task, n_con, seeds)
    stamps, cpu = [], []
    for epoch in range(epochs):
        for batch in batches(epoch):
            opt.zero_grad()
            tm.loss(torch.from_numpy(batch["context"]), torch.from_numpy(batch["target"])).backward()
            opt.step()
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
    print(json.dumps({"stamps": stamps, "cpu_stamps": cpu, "threads": torch.get_num_threads()}))


def measure_torch(kernel, setting, dtype):
    """Per-epoch seconds and CPU seconds of :func:`child` in a fresh process under ``OPENBLAS_CORETYPE=kernel``."""
    env = dict(os.environ)
    if kernel is not None:
        env["OPENBLAS_CORETYPE"] = kernel
    argv = [sys.executable, os.path.abspath(__file__), "--child", dtype, "--task", setting["task"],
            "--context", str(setting["n_con"]), "--seeds", str(setting["seeds"]), "--epochs", str(setting["epochs"])]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
    r = json.loads(done.stdout.strip().splitlines()[-1])
    return np.diff(r["stamps"]).tolist(), np.diff(r["cpu_stamps"]).tolist()


def time_kernel(kernel, setting, dtypes, passes, skip):
    """Per dtype and pass: refattn's and PyTorch's steady-state epoch (wall and CPU time), and the ratios
    refattn / PyTorch."""
    here = os.path.abspath(ROOT)
    out = {}
    for dtype in dtypes:
        out[dtype] = {"refattn": {"passes": [], "cpu_passes": []}, "torch": {"passes": [], "cpu_passes": []},
                      "reported_kernels": set()}
    for _ in range(passes):
        for dtype in dtypes:  # interleaved: both see the same load
            per_epoch, _, arch, per_epoch_cpu = measure(here, kernel, setting, dtype, cpu=True)
            out[dtype]["reported_kernels"].add(arch)
            out[dtype]["refattn"]["passes"].append(steady(per_epoch, skip))
            out[dtype]["refattn"]["cpu_passes"].append(steady(per_epoch_cpu, skip))
            wall, cpu = measure_torch(kernel, setting, dtype)
            out[dtype]["torch"]["passes"].append(steady(wall, skip))
            out[dtype]["torch"]["cpu_passes"].append(steady(cpu, skip))
    for dtype in dtypes:
        row = out[dtype]
        row["reported_kernels"] = sorted(k for k in row.pop("reported_kernels") if k)
        for prog in ("refattn", "torch"):
            row[prog]["median_ms"] = statistics.median(p["median_ms"] for p in row[prog]["passes"])
            row[prog]["cpu_median_ms"] = statistics.median(p["median_ms"] for p in row[prog]["cpu_passes"])
        for key, which in (("refattn_over_torch", "passes"), ("refattn_over_torch_cpu", "cpu_passes")):
            ratios = [a["median_ms"] / b["median_ms"] for a, b in zip(row["refattn"][which], row["torch"][which])]
            row[key] = {"ratio": statistics.median(ratios), "spread": [min(ratios), max(ratios)], "per_pass": ratios,
                        "target": 1.0, "met": statistics.median(ratios) <= 1.0}
    return {"kernel_asked": kernel, "dtypes": out}


def table(result):
    """A Markdown table: per kernel and dtype, each program's ms per epoch and the ratio."""
    lines = ["| BLAS kernel | dtype | refattn nt ms | PyTorch ms | refattn / PyTorch | CPU ms, refattn / PyTorch "
             "| CPU ratio |", "|---|---|---:|---:|---:|---:|---:|"]
    for k in result["kernels"]:
        for dtype, row in k["dtypes"].items():
            kernel = ", ".join(row["reported_kernels"]) or str(k["kernel_asked"])
            r, c = row["refattn_over_torch"], row["refattn_over_torch_cpu"]
            lines.append(f"| {kernel} | {dtype} | {row['refattn']['median_ms']:.1f} | {row['torch']['median_ms']:.1f} "
                         f"| {r['ratio']:.2f} ({r['spread'][0]:.2f}–{r['spread'][1]:.2f}) "
                         f"| {row['refattn']['cpu_median_ms']:.1f} / {row['torch']['cpu_median_ms']:.1f} "
                         f"| {c['ratio']:.2f} ({c['spread'][0]:.2f}–{c['spread'][1]:.2f}) |")
    return "\n".join(lines)


def main(argv=None):
    ap = machine.parser(__doc__)
    timing_options(ap)
    ap.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    ap.add_argument("--threads", type=machine.positive_int,
                    help="threads for both (REFATTN_NUM_THREADS, OMP_NUM_THREADS, OPENBLAS_NUM_THREADS); "
                         "default: each library's own choice, as a user runs it")
    ap.add_argument("--out", type=machine.output_file, help="write the results as JSON here")
    ap.add_argument("--child", choices=DTYPES, help=argparse_suppress())
    ap.add_argument("--task", default="N16T2", help=argparse_suppress())
    ap.add_argument("--context", type=machine.positive_int, default=32, help=argparse_suppress())
    ap.add_argument("--seeds", type=machine.positive_int, default=16, help=argparse_suppress())
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, args.task, args.context, args.seeds, args.epochs)
    if args.threads is not None:  # read by each child process when its libraries load
        for name in ("REFATTN_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[name] = str(args.threads)
    try:
        torch = _torch()
    except ImportError:
        ap.exit(2, f"{ap.prog}: PyTorch is not installed; pip install -e '.[bench]'\n")
    if args.quick:
        setting, passes, skip = dict(task="N16T2", n_con=8, seeds=2, epochs=6), 1, 1
    else:
        setting, passes, skip = dict(task="N16T2", n_con=32, seeds=16, epochs=args.epochs), args.passes, args.skip
    if setting["epochs"] < skip + 3:
        ap.error(f"--epochs: expected at least --skip + 3 = {skip + 3}, got {setting['epochs']}")
    t0 = time.perf_counter()
    result = {
        "command": " ".join(["python benchmarks/bench_nt_torch.py"] + list(sys.argv[1:] if argv is None else argv)),
        "what": "training time per epoch at steady state, refattn nt against the same model in plain PyTorch: the "
                f"median over epochs {skip + 1}.. of one process, then per pass the ratio refattn / PyTorch",
        "setting": dict(setting, passes=passes, skip=skip, activation="expressive", hidden_factor=HIDDEN_FACTOR,
                        lr=PAPER["lr"], momentum=PAPER["momentum"], threads=args.threads or "default"),
        "agreement_float64": agreement(**({"n_con": 8, "seeds": 2} if args.quick else {})),
        "machine": machine.describe(torch), "kernels": [],
    }
    worst = max(result["agreement_float64"].values())
    if not worst <= 1e-10:
        raise SystemExit(f"{ap.prog}: the PyTorch model differs from refattn's by {worst:.2e} (relative); "
                         f"they would not time the same computation")
    for kernel in args.kernels:
        result["kernels"].append(time_kernel(kernel, setting, args.dtypes, passes, skip))
        print(table(result), file=sys.stderr, flush=True)
    result["machine"]["load_average_at_end"] = list(os.getloadavg())
    result["seconds"] = time.perf_counter() - t0
    if args.out:
        machine.write_json(args.out, result)
    print(table(result))
    return 0


def argparse_suppress():
    import argparse  # noqa: PLC0415

    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
