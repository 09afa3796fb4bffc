r"""The cycle structure of Expressive's NT tasks (its Eqs. 5-7): ``refattn nt-cycles``.

A task's next symbol depends on the last ``tau + 1`` symbols, so its series
walk a map on ``N**(tau+1)`` states, and every series ends on a cycle of that
map. :func:`refattn.training.tasks.nt.state_cycles` finds every cycle exactly;
this study reports them as a line in the style of Expressive Eq. 7 (number of
cycles * cycle length, longest first), every reading of the "mean cycle
length" (:func:`refattn.training.tasks.nt.mean_cycle_length`; the mean over
cycles reproduces the paper's 47.6 and 23.8) and the comparison with the
paper's numbers where it prints them (``derivations/10-nt-tasks.md``,
sections 6-7).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..training.tasks.nt import (
    MEAN_READINGS,
    PAPER_CYCLES,
    PAPER_MEAN_CYCLE_LENGTH,
    VARIANTS,
    mean_cycle_length,
    state_cycles,
)
from ..training.runs import check_memory
from . import StudySettings, max_memory, option

__all__ = ["Settings", "run", "report", "plot"]

#: The figure ``refattn nt-cycles --out DIR`` writes.
FIGURE = "nt_cycles_N{N}T{tau}_{variant}.png"


@dataclass
class Settings(StudySettings):
    """Cycle lengths and counts of Expressive's NT, NT-S and NT-R tasks, and the mean cycle length."""

    N: int = option(help="the basis N (number of symbols)", low=2)
    tau: int = option(help="the delay tau", low=1)
    variant: str = option("NT", "the task", choices=VARIANTS)
    max_memory: float | None = max_memory()


def memory_estimate(N, tau):
    """Bytes ``refattn nt-cycles`` needs at its peak, before any work: the successor map and the
    cycle labels of the ``N^(tau+1)`` states (tracemalloc measures about 41 bytes per state; the
    estimate allows 48)."""
    return 48 * int(N) ** (int(tau) + 1) + 2**20


def run(settings):
    """The cycle structure of one task as a JSON-serialisable dict.

    Keys: ``task``, ``variant``, ``N``, ``tau``, ``states`` (``N**(tau+1)``),
    ``cycles`` (``[{"length", "count"}]``, longest first), ``check_sum``
    (``sum length * count``: the number of states on cycles, ``N**(tau+1)`` when
    the map is invertible), ``number_of_cycles``, ``invertible``,
    ``cyclic_states``, ``transient_states``, ``mean_cycle_length`` (every reading
    of :func:`refattn.training.tasks.nt.mean_cycle_length`, plus
    ``per_initial_condition``: the mean, over all ``N**(tau+1)`` initial
    conditions, of the length of the cycle the series ends on, which equals
    ``per_state`` when the map is invertible), ``mean_cycle_length_paper_reading``
    (the ``per_cycle`` value, the reading that reproduces Expressive's 47.6 and
    23.8), ``paper_reading``, and where the paper prints numbers for this task,
    ``paper_cycles`` / ``matches_paper_cycles`` (Eqs. 5-7) and
    ``paper_mean_cycle_length`` / ``matches_paper_mean_cycle_length`` (to the
    paper's one decimal). (``derivations/10-nt-tasks.md``, sections 6-7.)
    """
    if settings.variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {VARIANTS}, got {settings.variant!r}")
    check_memory(memory_estimate(settings.N, settings.tau), f"--N {settings.N} --tau {settings.tau} "
                 f"({settings.N}^{settings.tau + 1} states)", settings.max_memory)
    sc = state_cycles(settings.variant, settings.N, settings.tau)
    s = sc.structure
    n = sc.successor.size
    n_cyclic = int(np.count_nonzero(sc.on_cycle))
    means = {how: mean_cycle_length(s, how) for how in MEAN_READINGS}
    means["per_initial_condition"] = float(np.mean(sc.cycle_length))
    result = {
        "task": sc.task,
        "variant": settings.variant,
        "N": sc.N,
        "tau": sc.tau,
        "states": n,
        "cycles": [{"length": L, "count": c} for L, c in s.items()],
        "check_sum": sum(L * c for L, c in s.items()),
        "number_of_cycles": sum(s.values()),
        "invertible": sc.invertible,
        "cyclic_states": n_cyclic,
        "transient_states": n - n_cyclic,
        "mean_cycle_length": means,
        "paper_reading": "per_cycle",
        "mean_cycle_length_paper_reading": means["per_cycle"],
    }
    if sc.task in PAPER_CYCLES:
        result["paper_cycles"] = [{"length": L, "count": c} for L, c in PAPER_CYCLES[sc.task].items()]
        result["matches_paper_cycles"] = s == PAPER_CYCLES[sc.task]
    if sc.task in PAPER_MEAN_CYCLE_LENGTH:
        paper = PAPER_MEAN_CYCLE_LENGTH[sc.task]
        result["paper_mean_cycle_length"] = paper
        result["matches_paper_mean_cycle_length"] = {
            how: round(v, 1) == paper for how, v in means.items()}
    return result


def report(result):
    """:func:`run`'s result as text, the cycle sum written like Expressive Eq. 7.

    Example first line: ``N16T2: 64*56 + 16*28 + 4*14 + 1*7 + 1*1 = 4096 = 16^3``
    (number of cycles * cycle length, longest first), then the number of cycles,
    invertibility, every mean-cycle-length reading and the comparison with the
    paper (``derivations/10-nt-tasks.md``, sections 6-7).
    """
    terms = " + ".join(f"{c['count']}*{c['length']}" for c in result["cycles"])
    N, tau = result["N"], result["tau"]
    lines = [f"{result['task']}: {terms} = {result['check_sum']}"
             + (f" = {N}^{tau + 1}" if result["check_sum"] == result["states"] else
                f" states on cycles, of {result['states']} = {N}^{tau + 1}")]
    lines.append(f"  {result['number_of_cycles']} cycles; state map "
                 + ("invertible: every state lies on a cycle" if result["invertible"] else
                    f"not invertible: {result['transient_states']} transient states"))
    m = result["mean_cycle_length"]
    lines.append("  mean cycle length: " + ", ".join(f"{how} {v:.2f}" for how, v in m.items()))
    if "paper_mean_cycle_length" in result:
        hits = [how for how, ok in result["matches_paper_mean_cycle_length"].items() if ok]
        lines.append(f"  paper (section 5): {result['paper_mean_cycle_length']}; matched by "
                     + (", ".join(hits) if hits else "no reading"))
    if "matches_paper_cycles" in result:
        lines.append("  paper's cycle table (Eqs. 5-7, section 5): "
                     + ("reproduced exactly" if result["matches_paper_cycles"] else "NOT reproduced"))
    return "\n".join(lines)


def plot(result):
    """The states on cycles of each length (bars, longest cycle first, labelled by the length), and
    the transient states where the map is not invertible."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    cycles = result["cycles"]
    fig = Figure(figsize=(max(4.0, 0.45 * len(cycles) + 2), 3.0))
    ax = fig.subplots()
    states = [c["length"] * c["count"] for c in cycles]
    ax.bar(np.arange(len(cycles)), states, color="#1f5fbf", label="on cycles")
    for i, c in enumerate(cycles):
        ax.text(i, states[i], f"{c['count']}x{c['length']}", ha="center", va="bottom", fontsize=6)
    if result["transient_states"]:
        ax.bar([len(cycles)], [result["transient_states"]], color="0.6", label="transient")
    ax.set_xticks([])
    ax.set_xlabel("cycles of one length, longest first (label: count x length)")
    ax.set_ylabel("states")
    ax.set_title(f"{result['task']}: {result['states']} states, {result['number_of_cycles']} cycles", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
