r"""Proposition 2 of TanhMax, corrected, in numbers: ``refattn prop2``.

The numbers that ``derivations/05-proposition-2.md`` quotes, computed by
:mod:`refattn.theory.proposition2`:

* (a) ``softmax(0)`` is not a TanhMax output (every TanhMax output has l1
  norm below 1, Eq. 05.P2); the l1 norm and its margin for one row; a
  preimage found for a point of the open l1 ball;
* (b) the l1 gap between ``tanhmax(s + c 1)`` and ``softmax(s)``, from the
  forward passes and in closed form (05.P10): softmax's range lies in the
  *closure* of TanhMax's;
* (c) the singular values of ``log|phi(W h)|`` stacked over many ``h``:
  rank ``d + 1`` for softmax (the bottleneck), full rank for TanhMax and
  the other activations with a nonlinear ``log g``.

Every input is fixed (the rows below and ``seed``), so the output is the same
on every machine up to the last digit or two.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.activations import activation
from ..theory.proposition2 import (
    closure_gap,
    closure_gap_closed_form,
    in_tanhmax_range,
    log_rank,
    tanhmax_l1_margin,
    tanhmax_l1_norm,
    tanhmax_preimage,
)
from ..training.runs import check_memory
from ..custom import activation_label
from . import StudySettings, activation_option, max_memory, option, resolve_activation

__all__ = ["Settings", "run", "report", "plot"]

#: The figure ``refattn prop2 --out DIR`` writes.
FIGURE = "prop2.png"

#: The rows the derivation quotes: a row of scores for the l1 margin, a point of the l1 ball for the
#: preimage, a row of scores for the closure gap and the shifts c of its table.
ROW = (0.3, -1.2, 2.0, 0.0)
BALL_POINT = (0.5, -0.25, 0.125, 0.0)
GAP_ROW = (0.5, -1.0, 1.5, 0.2)
GAP_SHIFTS = (0.0, 1.0, 2.0, 5.0, 10.0, 15.0)


@dataclass
class Settings(StudySettings):
    """Proposition 2 of TanhMax corrected: the l1 ball that is TanhMax's range, softmax on its closure (the
    gap against the shift c), and the log-rank that survives, in the numbers of derivation 05."""

    activations: tuple[str, ...] = activation_option(("softmax", "tanhmax", "signexp", "sigsoftmax"),
                                                     "activations whose log-rank is measured")
    n: int = option(16, "tokens: columns of log|phi(W h)|", low=2)
    d: int = option(4, "width of h (softmax's rank is at most d + 1)", low=1)
    m: int = option(200, "random vectors h: rows of log|phi(W h)|", low=1)
    seed: int = option(0, "seed of W and the h", low=0)
    max_memory: float | None = max_memory()


def memory_estimate(n, d, m):
    """Bytes ``refattn prop2`` needs at its peak, before any work: the ``m x n`` matrix of
    log-weights and its ``m x d`` inputs, a few float64 copies of each (tracemalloc measures about
    four; the estimate allows six)."""
    return 48 * int(m) * (int(n) + int(d)) + 2**20


def run(settings):
    """The numbers of derivation 05 as a JSON-able dict.

    Keys: ``softmax_zero`` (the weights, their l1 norm and whether TanhMax's
    range holds them), ``row`` (a row of scores, its TanhMax l1 norm and
    margin), ``preimage`` (a point of the l1 ball, the preimage found, and
    TanhMax of it), ``closure_gap`` (the table at :data:`GAP_SHIFTS`) and
    ``closure_gap_curve`` (61 shifts from 0 to 15, for the figure), and
    ``log_rank`` (per activation: the rank, the softmax bound ``d + 1`` and
    the singular values).
    """
    check_memory(memory_estimate(settings.n, settings.d, settings.m),
                 f"--n {settings.n} --d {settings.d} --m {settings.m}", settings.max_memory)
    sm = activation("softmax")(np.zeros(4))
    s = np.array(ROW)
    w = np.array(BALL_POINT)
    z = tanhmax_preimage(w)
    g = np.array(GAP_ROW)
    table, curve = np.array(GAP_SHIFTS), np.linspace(0.0, 15.0, 61)
    ranks = {}
    for value in settings.activations:
        r = log_rank(resolve_activation(value, "activations"), n=settings.n, d=settings.d, m=settings.m,
                     seed=settings.seed)
        ranks[activation_label(value)] = {"rank": r["rank"], "softmax_bound": r["softmax_bound"], "tol": r["tol"],
                       "singular_values": r["singular_values"].tolist()}
    return {
        "softmax_zero": {"weights": sm.tolist(), "l1_norm": float(np.sum(np.abs(sm))),
                         "in_tanhmax_range": bool(in_tanhmax_range(sm))},
        "row": {"s": list(ROW), "tanhmax_l1_norm": float(tanhmax_l1_norm(s)),
                "tanhmax_l1_margin": float(tanhmax_l1_margin(s))},
        "preimage": {"w": list(BALL_POINT), "preimage": z.tolist(),
                     "tanhmax_of_preimage": activation("tanhmax")(z).tolist()},
        "closure_gap": {"s": list(GAP_ROW), "c": table.tolist(), "numerical": closure_gap(g, table).tolist(),
                        "closed_form": closure_gap_closed_form(g, table).tolist()},
        "closure_gap_curve": {"c": curve.tolist(), "numerical": closure_gap(g, curve).tolist(),
                              "closed_form": closure_gap_closed_form(g, curve).tolist()},
        "log_rank": {"n": settings.n, "d": settings.d, "m": settings.m, "seed": settings.seed,
                     "activations": ranks},
    }


def report(result):
    """:func:`run`'s numbers as the lines derivation 05 quotes."""
    a = np.asarray
    z, r, p, gap, lr = (result[k] for k in ("softmax_zero", "row", "preimage", "closure_gap", "log_rank"))
    lines = [f"softmax(0) = {a(z['weights'])}  sum|.| = {z['l1_norm']}  in_tanhmax_range: {z['in_tanhmax_range']}",
             f"s = {a(r['s'])}  sum|tanhmax(s)| = {r['tanhmax_l1_norm']!r}  margin (05.P3) = {r['tanhmax_l1_margin']!r}",
             f"w = {a(p['w'])}  preimage = {a(p['preimage'])}  tanhmax(preimage) = {a(p['tanhmax_of_preimage'])}",
             f"closure gap, s = {a(gap['s'])}"]
    for c, g1, g2 in zip(gap["c"], gap["numerical"], gap["closed_form"]):
        lines.append(f"  c = {c:5.1f}  numerical {g1:.6e}  closed form {g2:.6e}")
    for name, rk in lr["activations"].items():
        sv = rk["singular_values"]
        lines.append(f"log_rank({name!r}, n={lr['n']}, d={lr['d']}, m={lr['m']}, seed={lr['seed']}): rank "
                     f"{rk['rank']} (softmax bound d+1 = {rk['softmax_bound']}); singular values 5-7: "
                     + ", ".join(f"{v:.3e}" for v in sv[4:7]) + f"; smallest {sv[-1]:.3e}")
    return "\n".join(lines)


def plot(result):
    """Left: the closure gap against the shift c, forward passes and closed form (05.P10), with the
    rate ``e^{-2c}``; right: the singular values of ``log|phi(W h)|`` relative to the largest."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(10, 3.5))
    ax, bx = fig.subplots(1, 2)
    cv = result["closure_gap_curve"]
    c = np.asarray(cv["c"])
    ax.semilogy(c, cv["numerical"], "o", ms=3, label="forward passes")
    ax.semilogy(c, cv["closed_form"], "-", label="closed form (05.P10)")
    ax.semilogy(c, cv["closed_form"][0] * np.exp(-2 * c), ":", color="gray", label="rate e^{-2c}")
    ax.set_xlabel("shift c")
    ax.set_ylabel("l1 gap |tanhmax(s + c1) - softmax(s)|")
    ax.set_title(f"(b) s = {result['closure_gap']['s']}", fontsize=9)
    ax.legend(fontsize=7)
    lr = result["log_rank"]
    for name, rk in lr["activations"].items():
        sv = np.asarray(rk["singular_values"])
        bx.semilogy(np.arange(1, sv.size + 1), sv / sv[0], "o-", ms=3, label=f"{name}: rank {rk['rank']}")
    bx.axvline(lr["d"] + 1, color="gray", lw=0.6, ls="--")
    bx.set_xlabel("index of the singular value")
    bx.set_ylabel("sigma_k / sigma_1")
    bx.set_title(f"(c) log|phi(W h)|, n = {lr['n']}, d = {lr['d']}, m = {lr['m']}: softmax has rank d + 1",
                 fontsize=9)
    bx.legend(fontsize=7)
    fig.tight_layout()
    return fig
