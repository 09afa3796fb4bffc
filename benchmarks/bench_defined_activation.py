"""How fast an activation of your own runs: define_activation against an Activation subclass and softmax.

    python benchmarks/bench_defined_activation.py                 # (B, H, n, d) = (1, 2, 1024, 32), one thread
    python benchmarks/bench_defined_activation.py --json          # machine-readable
    python benchmarks/bench_defined_activation.py --quick         # tiny shape, one run: a smoke test
    python benchmarks/bench_defined_activation.py --out FILE.json # also save the JSON

The activation is ``docs/examples/soft_sign.py``'s, ``g(s) = s / (1 + |s|)``,
``h(s) = 1 + |s|``, timed through the fast path (:func:`refattn.fast.attention`
then :func:`refattn.fast.attention_backward`, the scaled dot-product score,
float64) in four forms:

* ``softmax``: the built-in, with its own kernel (the yardstick);
* ``subclass``: the same formula written as an ``Activation`` subclass, its
  ``rho = s / (1 + |s|)^2``, ``ell = log(1 + |s|)`` and their derivatives by
  hand; the fast path runs it through the reference's functions
  (``refattn.fast.kernels.Generic``);
* ``defined``: ``refattn.define_activation`` with ``g``, ``h`` and the
  hand-given ``dg``, ``dh`` (the file's ``soft_sign``); the fast path's
  ``PaperForm`` kernel evaluates ``g, h`` once in the forward pass and
  ``g', h'`` once in the backward;
* ``defined_autograd``: the same ``g``, ``h`` with ``dg``, ``dh`` left to
  autograd (``elementwise_grad``, whole-array code traced at every call).

The targets (the Verify page's): ``defined`` within 2x of ``subclass`` and
within 3x of ``softmax``. All four are first checked to give the same
gradients (the subclass and both defined forms to 1e-10; a timing of a wrong
result means nothing). refattn and BLAS run on one thread, freed memory is
kept for the next call as the command line keeps it; timing as in
``bench_cpu_attention.py``: each of ``--passes`` passes times every candidate
``--repeats`` times in a row after a pause and a warm-up, a time is the median
of all runs, a ratio the median over passes of the ratio of the two medians
in that pass. The JSON records the machine, the BLAS kernel and the versions.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu_attention import median_ratio, run_grouped  # noqa: E402  (this folder's timing helpers)
import machine  # noqa: E402  (this folder's option checks and machine description)

from refattn import define_activation, fast  # noqa: E402
from refattn.core.activations import Activation  # noqa: E402
from refattn.core.backend import array_module  # noqa: E402
from refattn.custom import load_activation  # noqa: E402
from refattn.fast.memory import retain_freed_memory  # noqa: E402
from refattn.fast.threads import single_threaded_blas  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "examples", "soft_sign.py")


class SoftSignSubclass(Activation):
    """``docs/examples/soft_sign.py``'s formula in the reweighted form a subclass writes:
    ``rho = g / h = s / (1 + |s|)^2``, ``ell = log h = log(1 + |s|)``."""

    name = "soft_sign_subclass"

    def rho(self, s):
        return s / (1.0 + array_module(s).abs(s)) ** 2

    def drho(self, s):
        a = array_module(s).abs(s)
        return (1.0 - a) / (1.0 + a) ** 3  # d/ds s (1 + |s|)^-2 = (1 + |s|)^-2 - 2|s| (1 + |s|)^-3

    def ell(self, s):
        return array_module(s).log1p(array_module(s).abs(s))

    def dell(self, s):
        xp = array_module(s)
        return xp.sign(s) / (1.0 + xp.abs(s))  # (log(1 + |s|))' = sign(s) / (1 + |s|)


def forms():
    """``{name: activation}`` of the four forms timed."""
    defined = load_activation(f"{EXAMPLE}:soft_sign")
    f = defined.functions
    return {"softmax": "softmax", "subclass": SoftSignSubclass(), "defined": defined,
            "defined_autograd": define_activation("soft_sign_autograd", f["g"], f["h"])}


def step(act, Q, K, V, G):
    """One forward and backward pass of the fast path: ``(dQ, dK, dV)``."""
    _, cache = fast.attention(Q, K, V, activation=act)
    return fast.attention_backward(G, cache)[:3]


def same_gradients(acts, Q, K, V, G):
    """Largest relative difference of each form's gradients from the subclass's (the same formula)."""
    ref = step(acts["subclass"], Q, K, V, G)
    scale = max(float(np.max(np.abs(r))) for r in ref)
    out = {}
    for name in ("defined", "defined_autograd"):
        got = step(acts[name], Q, K, V, G)
        out[name] = max(float(np.max(np.abs(a - b))) for a, b in zip(got, ref)) / scale
    return out


def main(argv=None):
    ap = machine.parser(__doc__, whole=True)
    ap.add_argument("--shape", type=machine.positive_int, nargs=4, default=(1, 2, 1024, 32),
                    metavar=("B", "H", "n", "d"))
    ap.add_argument("--repeats", type=machine.positive_int, default=7, help="runs per candidate and pass (default 7)")
    ap.add_argument("--passes", type=machine.positive_int, default=5, help="passes over all candidates (default 5)")
    ap.add_argument("--quick", action="store_true", help="(1, 2, 32, 8), 1 pass of 2 runs, no pauses: a smoke test")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--out", type=machine.output_file, help="also write the JSON to this file")
    args = ap.parse_args(argv)
    shape, repeats, passes, pause, warmup = tuple(args.shape), args.repeats, args.passes, 0.2, 0.15
    if args.quick:
        shape, repeats, passes, pause, warmup = (1, 2, 32, 8), 2, 1, 0.0, 0.0
    retain_freed_memory()
    fast.set_num_threads(1)
    rng = np.random.default_rng(0)
    Q, K, V, G = (rng.standard_normal(shape) for _ in range(4))
    acts = forms()
    with single_threaded_blas():
        differences = same_gradients(acts, Q, K, V, G)
        if max(differences.values()) > 1e-10:
            raise SystemExit(f"the defined forms' gradients differ from the subclass's: {differences}")
        candidates = {name: (lambda a=a: step(a, Q, K, V, G)) for name, a in acts.items()}
        times = run_grouped(candidates, passes, repeats, pause, warmup)
    ms = {k: 1e3 * statistics.median(t for group in v for t in group) for k, v in times.items()}
    ratios = {"defined_over_subclass": median_ratio(times["defined"], times["subclass"]),
              "defined_over_softmax": median_ratio(times["defined"], times["softmax"]),
              "subclass_over_softmax": median_ratio(times["subclass"], times["softmax"]),
              "defined_autograd_over_subclass": median_ratio(times["defined_autograd"], times["subclass"]),
              "defined_autograd_over_softmax": median_ratio(times["defined_autograd"], times["softmax"])}
    verdict = {"defined_within_2x_of_subclass": bool(ratios["defined_over_subclass"] <= 2.0),
               "defined_within_3x_of_softmax": bool(ratios["defined_over_softmax"] <= 3.0)}
    result = {"shape": list(shape), "dtype": "float64", "threads": {"refattn": 1, "blas": 1},
              "repeats": repeats, "passes": passes,
              "timing": "fast path forward + backward; median of passes x repeats runs; ratios: median over passes",
              "ms": ms, "ratios": ratios, "verdict": verdict, "max_relative_gradient_difference": differences,
              "machine": machine.describe()}
    if args.out:
        machine.write_json(args.out, result)
    if args.json:
        print(json.dumps(result, indent=2))
        return result
    m = result["machine"]
    print(f"fast path forward + backward, (B, H, n, d) = {shape}, float64, one thread; {m['cpu']}, "
          f"OpenBLAS kernel {m['blas_kernel']}, NumPy {m['numpy']}, Python {m['python']}")
    for name, t in ms.items():
        print(f"  {name:17s} {t:8.1f} ms")
    for name, r in ratios.items():
        print(f"  {name:31s} {r:5.2f}")
    for name, ok in verdict.items():
        print(f"{name}: {ok}")
    return result


if __name__ == "__main__":
    main()
