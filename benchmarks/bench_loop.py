"""Forward + backward in a loop, alone in a fresh process: time and page faults per step.

    python benchmarks/bench_loop.py softmax            # the blocked route (the default)
    python benchmarks/bench_loop.py softmax --unblocked
    python benchmarks/bench_loop.py --torch            # PyTorch eager softmax attention
    python benchmarks/bench_loop.py softmax tanhmax --out benchmarks/results/loop-avx2.json

``bench_cpu_attention.py`` times every candidate in one long-lived process, whose
``malloc`` has by then grown and holds plenty of freed memory; this script
is the other extreme, a small program that does nothing but attention steps,
so that memory the step frees and maps again shows up as page faults. It
prints the median and minimum time of ``--steps`` steps after ``--warmup``
untimed ones, and the page faults and system (kernel) time per step. With
``--out FILE`` it runs each activation named on both routes, blocked and
whole-batch, each in a fresh process of its own, and saves them all with the
command and the machine.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

from refattn import ACTIVATIONS
from refattn.fast import set_blocking
from refattn.fast import attention, attention_backward

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402  (this folder's option checks)


def main(argv=None):
    ap = machine.parser(__doc__, whole=True)
    ap.add_argument("activation", nargs="*", help="one or more of " + ", ".join(ACTIVATIONS) + " (default softmax)")
    ap.add_argument("--unblocked", action="store_true", help="the whole-batch route (set_blocking(False))")
    ap.add_argument("--torch", action="store_true", help="PyTorch eager softmax attention instead")
    ap.add_argument("--shape", type=machine.positive_int, nargs=4, default=(4, 4, 256, 64), metavar=("B", "H", "n", "d"))
    ap.add_argument("--steps", type=machine.positive_int, default=40)
    ap.add_argument("--warmup", type=machine.non_negative_int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=machine.output_file,
                    help="run each activation on both routes, each in a fresh process, and save them all here")
    args = ap.parse_args(argv)
    unknown = [a for a in args.activation if a not in ACTIVATIONS]
    if unknown:
        machine.fail(ap, "activation", "one of " + ", ".join(ACTIVATIONS), unknown[0])
    args.activation = args.activation or ["softmax"]
    if args.out or len(args.activation) > 1:
        return _fresh_processes(args, argv)
    args.activation = args.activation[0]
    rng = np.random.default_rng(0)
    Q, K, V, G = (rng.standard_normal(tuple(args.shape)) for _ in range(4))
    if args.torch:
        import torch

        q, k, v, g = (torch.from_numpy(x) for x in (Q, K, V, G))
        scale = 1.0 / np.sqrt(Q.shape[-1])

        def step():
            qq, kk, vv = (t.detach().requires_grad_(True) for t in (q, k, v))
            (torch.softmax((qq @ kk.transpose(-1, -2)) * scale, dim=-1) @ vv).backward(g)
    else:
        set_blocking(not args.unblocked)

        def step():
            attention_backward(G, attention(Q, K, V, activation=args.activation)[1])

    for _ in range(args.warmup):
        step()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    ts = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    res = {"what": "torch softmax" if args.torch else args.activation,
           "route": None if args.torch else ("unblocked" if args.unblocked else "blocked"),
           "shape": list(args.shape), "median_ms": 1e3 * statistics.median(ts), "min_ms": 1e3 * min(ts),
           "page_faults_per_step": (r1.ru_minflt - r0.ru_minflt) / args.steps,
           "system_ms_per_step": 1e3 * (r1.ru_stime - r0.ru_stime) / args.steps}
    if args.json:
        print(json.dumps(res))
    else:
        print(f"{res['what']:12s} {res['route'] or '':9s} median {res['median_ms']:6.2f} ms  min {res['min_ms']:6.2f} ms  "
              f"page faults/step {res['page_faults_per_step']:7.0f}  kernel ms/step {res['system_ms_per_step']:5.2f}")
    return res


def _fresh_processes(args, argv):
    """Each activation on the blocked and the whole-batch route, each in a process of its own."""
    runs = []
    for name in args.activation:
        for route in ([], ["--unblocked"]):
            cmd = [sys.executable, os.path.abspath(__file__), name, *route, "--shape", *map(str, args.shape),
                   "--steps", str(args.steps), "--warmup", str(args.warmup), "--json"]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            runs.append(json.loads(done.stdout))
            r = runs[-1]
            print(f"{r['what']:12s} {r['route']:9s} median {r['median_ms']:6.2f} ms  page faults/step "
                  f"{r['page_faults_per_step']:7.0f}  kernel ms/step {r['system_ms_per_step']:5.2f}", flush=True)
    if args.out:
        machine.write_json(args.out, {"command": " ".join(["python benchmarks/bench_loop.py"] + list(
            sys.argv[1:] if argv is None else argv)), "machine": machine.describe(), "runs": runs})
    return runs


if __name__ == "__main__":
    main()
