r"""signexp at a score of 0: the analytic VJP, autograd and central differences side by side.

``refattn signexp-at-zero``. SignExp's numerator ``g(s) = sign(s) e^{|s|}``
(Cog) jumps at 0; the library's VJP and autograd use the pointwise slope
there, central differences whose window contains 0 see the jump as a spike
of height about ``jump / (2 eps)``.
:func:`refattn.theory.signexp_at_zero.signexp_near_zero` computes the three
estimates of one entry's gradient and their closed-form predictions as that
entry crosses 0; this study prints them at the offsets of
:data:`refattn.theory.signexp_at_zero.DEFAULT_OFFSETS` (the table of
``derivations/09-signexp-at-zero.md``) and draws them against ``|delta|``
on both sides of 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..theory.signexp_at_zero import DEFAULT_OFFSETS, signexp_near_zero
from ..training.runs import jsonable
from ..training.runs import check_memory
from . import StudySettings, max_memory, option

__all__ = ["Settings", "run", "report", "plot"]

#: The figure ``refattn signexp-at-zero --out DIR`` writes.
FIGURE = "signexp_at_zero.png"

#: The |delta| of the figure's sweep, on each side of 0.
SWEEP = tuple(np.logspace(-10, -1, 37))


@dataclass
class Settings(StudySettings):
    """signexp at a score of 0: analytic VJP, autograd and central differences of one entry's gradient as
    the entry crosses 0, with the closed-form spike of the differences (Cog)."""

    n: int = option(5, "length of the random row", low=1)
    j: int = option(0, "the entry that crosses 0", low=0)
    eps: float = option(1e-6, "step of the central differences", positive=True, high=0.5)
    seed: int = option(0, "seed of the row and the cotangent", low=0)
    max_memory: float | None = max_memory()

    def check(self):
        """The entry that crosses 0 is one of the row's."""
        if self.j >= self.n:
            raise ValueError(f"j: expected an entry of the row, below n = {self.n}, got {self.j}")


def memory_estimate(n):
    """Bytes ``refattn signexp-at-zero`` needs at its peak, before any work: a few float64 copies
    of the row and its gradients per offset (tracemalloc measures about 230 bytes per entry of the
    row; the estimate allows 400)."""
    return 400 * int(n) + 2**20


def run(settings):
    """The table at :data:`refattn.theory.signexp_at_zero.DEFAULT_OFFSETS` and the sweep of the figure.

    Returns the dict of :func:`refattn.theory.signexp_at_zero.signexp_near_zero` (as lists) with one
    more key, ``sweep``: the same estimates at ``+|delta|`` and ``-|delta|`` for every ``|delta|``
    of :data:`SWEEP`.
    """
    check_memory(memory_estimate(settings.n), f"--n {settings.n}", settings.max_memory)
    kw = {"n": settings.n, "eps": settings.eps, "seed": settings.seed, "j": settings.j}
    result = jsonable(signexp_near_zero(DEFAULT_OFFSETS, **kw))
    result["sweep"] = {side: jsonable(signexp_near_zero(sign * np.array(SWEEP), **kw))
                       for side, sign in (("delta > 0", 1.0), ("delta < 0", -1.0))}
    return result


def report(result):
    """The result of :func:`run` (or of :func:`refattn.theory.signexp_at_zero.signexp_near_zero`) as a
    plain-text (markdown) table."""
    lines = [f"signexp, entry j = {result['j']} of a row of n = {result['n']} (seed {result['seed']}), "
             f"eps = {result['eps']:g}; jump J = {result['jump']:.6g}, one-sided limits "
             f"L+ = {result['limit_plus']:.6g}, L- = {result['limit_minus']:.6g}",
             "",
             "| delta | regime | analytic | autograd | central | predicted (09.Z8) | exact quotient (09.Z6) |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    cols = ("analytic", "autograd", "central", "central_predicted", "central_exact")
    for i, d in enumerate(result["offsets"]):
        # "+ 0.0" prints IEEE -0.0 (which the VJP returns at an exact 0) as 0
        vals = " | ".join(f"{result[c][i] + 0.0:.10g}" for c in cols)
        lines.append(f"| {d:+.0e} | {result['regime'][i]} | {vals} |")
    return "\n".join(lines)


def plot(result):
    """The three estimates' magnitudes against ``|delta|`` (log-log), one panel per side of 0, with the
    prediction of the central differences (09.Z8) and the window's edge ``|delta| = eps`` dashed."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(9.0, 3.5))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (label, r) in zip(axes, result["sweep"].items()):
        mag = np.abs(r["offsets"])
        ax.loglog(mag, np.abs(r["central"]), "o", ms=4, mfc="none", label="central differences")
        ax.loglog(mag, np.abs(r["central_predicted"]), "-", lw=1, color="k", label="prediction (09.Z8)")
        ax.loglog(mag, np.abs(r["analytic"]), "s", ms=3, label="analytic VJP")
        ax.loglog(mag, np.abs(r["autograd"]), "x", ms=4, label="autograd")
        ax.axvline(r["eps"], color="gray", lw=0.6, ls="--")
        ax.set_title(f"{label}: entry j = {r['j']}, eps = {r['eps']:g}", fontsize=9)
        ax.set_xlabel("|delta|", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("|d(u . phi) / d s_j|", fontsize=8)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig
