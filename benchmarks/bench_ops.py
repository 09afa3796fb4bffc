"""What one NumPy pass costs, in cache and out of it (the numbers behind derivations/20-speed.md).

    python benchmarks/bench_ops.py          # one (256, 256) float64 slice and a (16, 256, 256) batch
    python benchmarks/bench_ops.py --json
    python benchmarks/bench_ops.py --out benchmarks/results/ops-avx2.json   # also save the JSON

For each elementwise operation the activations use, the median time of one
pass over one score slice of attention at n = 256 (512 KiB, which fits in a
core's L2 cache) and over the whole batch of the issue-2 benchmark (16 such
slices, 8 MiB), writing into an existing array; then a matrix product of one
slice as attention does it (256 x 64 times 64 x 256, BLAS on one thread), and
the cost of writing 8 MiB of freshly allocated memory against 8 MiB that is
already mapped. Each number is the median of ``--repeats`` runs, each timed
in this process's CPU time (one thread: a machine busy with other work
stretches wall-clock time, not the CPU time of a pass); ``--out``
saves them with the command, the machine and each pass's multiple of the
cheapest pass over one slice.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np

from refattn.fast import threads as parallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402  (this folder's option checks)


def _median_us(fn, repeats):
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        ts.append(time.process_time() - t0)
    return 1e6 * statistics.median(ts)


def elementwise_ops(x, out):
    """name -> callable writing one pass over ``x`` into ``out`` (or reducing it)."""
    pos = np.abs(x) + 0.5  # (for log1p and log) positive, made once, not timed
    return {
        "multiply by a scalar": lambda: np.multiply(x, 0.5, out=out),
        "multiply two arrays": lambda: np.multiply(x, x, out=out),
        "abs": lambda: np.abs(x, out=out),
        "add a boolean array": lambda: np.add(x, x > 0, out=out),
        "divide": lambda: np.divide(x, x, out=out),
        "exp": lambda: np.exp(x, out=out),
        "tanh": lambda: np.tanh(x, out=out),
        "log1p": lambda: np.log1p(pos, out=out),
        "log": lambda: np.log(pos, out=out),
        "sign": lambda: np.sign(x, out=out),
        "minimum with 0": lambda: np.minimum(x, 0.0, out=out),
        "where (select)": lambda: np.copyto(out, np.where(x > 0, x, 1.0)),
        "max over the last axis": lambda: x.max(axis=-1, keepdims=True),
        "sum over the last axis": lambda: x.sum(axis=-1, keepdims=True),
    }


def main(argv=None):
    ap = machine.parser(__doc__, whole=True)
    ap.add_argument("--repeats", type=machine.positive_int, default=200)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=machine.output_file, help="also write the JSON to this file")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    one = rng.standard_normal((256, 256))
    batch = rng.standard_normal((16, 256, 256))
    res = {"slice_us": {}, "batch_us": {}}
    for key, x in (("slice_us", one), ("batch_us", batch)):
        out = np.empty_like(x)
        reps = args.repeats if x is one else max(1, args.repeats // 10)
        for name, fn in elementwise_ops(x, out).items():
            res[key][name] = _median_us(fn, reps)
    a, b = rng.standard_normal((256, 64)), rng.standard_normal((64, 256))
    c = np.empty((256, 256))
    with parallel.single_threaded_blas():
        res["matmul_slice_1_thread_us"] = _median_us(lambda: np.matmul(a, b, out=c), args.repeats)
    mapped = np.empty(batch.shape)
    mapped.fill(0.0)
    res["write_8MiB_mapped_us"] = _median_us(lambda: mapped.fill(1.0), max(1, args.repeats // 10))
    res["write_8MiB_fresh_us"] = _median_us(lambda: np.empty(batch.shape).fill(1.0), max(1, args.repeats // 10))
    cheapest = min(res["slice_us"].values())
    res["slice_over_cheapest"] = {name: us / cheapest for name, us in res["slice_us"].items()}
    if args.out:
        machine.write_json(args.out, {"command": " ".join(["python benchmarks/bench_ops.py"] + list(
            sys.argv[1:] if argv is None else argv)), "repeats": args.repeats,
            "timing": "CPU time of this process, median of --repeats runs", "machine": machine.describe(), **res})
    if args.json:
        print(json.dumps(res, indent=2))
        return res
    print(f"{'operation':24s} {'one slice (us)':>15s} {'16 slices (us)':>15s} {'x cheapest':>11s}")
    for name in res["slice_us"]:
        print(f"{name:24s} {res['slice_us'][name]:15.1f} {res['batch_us'][name]:15.1f} "
              f"{res['slice_us'][name] / cheapest:11.1f}")
    print(f"matmul 256x64 @ 64x256, one thread: {res['matmul_slice_1_thread_us']:.1f} us per slice")
    print(f"write 8 MiB: already mapped {res['write_8MiB_mapped_us']:.0f} us, "
          f"freshly allocated {res['write_8MiB_fresh_us']:.0f} us")
    return res


if __name__ == "__main__":
    main()
