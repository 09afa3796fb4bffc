"""What the NT runs that were not made would cost (derivation 15, section 11.8).

Expressive's text makes two statements at context lengths the project did
not run at full size: N16T5 at ``N_con = 256`` ("DPA remains in a local
trap [...] of roughly 0.44") and ``N_con = 512`` (training "becomes
unstable"). This script measures, for 16 seeds batched in float32 on one
BLAS thread, the training time per epoch (evaluations left out), the time
of one evaluation (100 test series per seed, 50 greedy steps) and the
process's peak memory, for each context length and attention, each in a
fresh process; then multiplies out the cost of one grid cell at the
paper's 2000 epochs with an evaluation every 250 epochs. N_con = 128
(Fig. 5, which was run) is measured beside them as the reference.

    python benchmarks/bench_nt_cost.py --out benchmarks/results/nt_cost.json
    python benchmarks/bench_nt_cost.py --quick      # N_con = 32 only, seconds

Not part of the test run; nothing here asserts a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from refattn.training.runs import machine_info  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402  (this folder's option checks)

# one measurement in a fresh process: its peak memory is its own
CHILD = """
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from refattn.studies.nt_training import Settings, run_nt, memory_estimate
task, n_con, activation, epochs = sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
r = run_nt(Settings(task=task, context=n_con, activation=activation, seeds=16, epochs=epochs, eval_every=epochs,
                    init_scale=0.5, lr=0.02, dtype="float32"), progress=False)
print(json.dumps({"train_seconds_per_epoch": r["train_seconds_per_epoch"], "eval_seconds": r["eval_seconds"],
                  "n_params": r["n_params"], "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "memory_estimate_gib": memory_estimate(n_con, 16, itemsize=4) / 2**30}))
"""


def measure(task, n_con, attention, epochs):
    env = dict(os.environ, REFATTN_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD, ROOT, task, str(n_con), attention, str(epochs)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = machine.parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="N_con = 32 only, for a look")
    ap.add_argument("--epochs", type=machine.positive_int, default=10, help="epochs timed per measurement (default 10)")
    ap.add_argument("--out", type=machine.output_file, help="write the results as JSON here")
    args = ap.parse_args(argv)
    lengths = (32,) if args.quick else (128, 256, 512)
    full_epochs, eval_every = 2000, 250
    rows = []
    for n_con in lengths:
        for attention in ("expressive", "softmax"):
            m = measure("N16T5", n_con, attention, args.epochs)
            n_evals = full_epochs // eval_every
            cell_minutes = (full_epochs * m["train_seconds_per_epoch"] + n_evals * m["eval_seconds"]) / 60
            rows.append({"n_con": n_con, "attention": attention, **m,
                         "minutes_per_attention_and_cell": cell_minutes})
            print(f"N_con = {n_con:4d} {attention:10s}: {m['train_seconds_per_epoch']:7.3f} s/epoch, "
                  f"{m['eval_seconds']:6.1f} s/evaluation, peak {m['peak_rss_gib']:.2f} GiB "
                  f"(estimate {m['memory_estimate_gib']:.2f}), {m['n_params']} parameters per seed; "
                  f"{full_epochs} epochs + {n_evals} evaluations: {cell_minutes:.0f} min", flush=True)
    result = {"command": "python benchmarks/bench_nt_cost.py" + (" --quick" if args.quick else "")
              + (f" --epochs {args.epochs}" if args.epochs != 10 else "") + (f" --out {args.out}" if args.out else ""),
              "setting": {"task": "N16T5", "seeds": 16, "dtype": "float32", "threads": 1, "init_scale": 0.5,
                          "lr": 0.02, "epochs_timed": args.epochs, "cell": {"epochs": full_epochs,
                                                                            "eval_every": eval_every}},
              "machine": machine_info(), "load_average": os.getloadavg(), "rows": rows}
    if args.out:
        machine.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
