r"""The four properties of TanhMax section 4 for every activation, beside its Table 3: ``refattn properties``.

:func:`refattn.theory.properties.measure` measures monotonicity,
log-nonlinearity, contextual normalisation and origin symmetry of one
activation; this study measures every registered activation (so a newly
registered one is covered without being listed anywhere) and compares the
result with the paper's Table 3 (:data:`refattn.theory.properties.PAPER_TABLE3`,
the one thing written down by hand). Criteria, tolerances and a proof per
activation class: ``derivations/06-four-properties.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.activations import ACTIVATIONS
from ..theory.properties import (
    CRITERIA,
    PAPER_ROW_NAMES,
    PAPER_TABLE3,
    PROPERTIES,
    PROPERTY_TITLES,
    default_grid,
    measure,
    tolerances,
)
from ..custom import activation_label
from . import StudySettings, activation_option, option, resolve_activation

__all__ = ["Settings", "run", "report", "plot"]

#: The figure ``refattn properties --out DIR`` writes.
FIGURE = "properties.png"


@dataclass
class Settings(StudySettings):
    """The four properties of TanhMax section 4 (monotonicity, log-nonlinearity, contextual normalisation,
    origin symmetry), measured for every activation, beside the paper's Table 3.

    ``activations`` picks some (``refattn properties --activations FILE.py:NAME`` prints the row of an
    activation of yours); by default every registered one."""

    seed: int = option(0, "seed of the random rows", low=0)
    activations: tuple[str, ...] | None = activation_option(None, "comma-separated activations (default: every "
                                                                  "registered activation)")


def _marks(row: dict) -> str:
    held = [PROPERTY_TITLES[p] for p in PROPERTIES if row[p]]
    missed = [PROPERTY_TITLES[p] for p in PROPERTIES if not row[p]]
    if not missed:
        return "all four hold"
    return (("holds: " + ", ".join(held) + "; " if held else "") + "fails: " + ", ".join(missed))


def run(settings) -> dict:
    """The four properties measured for every activation (:func:`refattn.theory.properties.measure`),
    compared with TanhMax's Table 3 (``derivations/06-four-properties.md``, section 6): ``activations``
    (the measures), ``computed`` (property -> holds), ``paper_table3``, ``comparison`` (Table 3's rows),
    ``agree_with_paper``, ``differences`` (disagreements, then rows Table 3 lacks), ``criteria``,
    ``tolerances``, ``grid`` and ``seed``."""
    seed = settings.seed
    grid = default_grid()
    chosen = ACTIVATIONS if settings.activations is None else settings.activations
    chosen = {activation_label(a): resolve_activation(a, "activations") for a in chosen}  # every one loaded first
    activations = {name: measure(act, grid=grid, seed=seed) for name, act in chosen.items()}
    computed = {name: {p: m[p]["holds"] for p in PROPERTIES} for name, m in activations.items()}
    comparison, differences = [], []
    for name, paper in PAPER_TABLE3.items():
        if name not in computed:  # an activation the registry no longer has, or one not asked for
            if settings.activations is None:
                differences.append(f"{name} ({PAPER_ROW_NAMES[name]}): in Table 3 but not registered")
            continue
        for p in PROPERTIES:
            agree = paper[p] == computed[name][p]
            comparison.append({"activation": name, "paper_row": PAPER_ROW_NAMES[name],
                               "property": p, "paper": bool(paper[p]),
                               "computed": computed[name][p], "agree": bool(agree)})
            if not agree:
                differences.append(
                    f"{name} ({PAPER_ROW_NAMES[name]}), {PROPERTY_TITLES[p]}: Table 3 says "
                    f"{'yes' if paper[p] else 'no'}, computed {'yes' if computed[name][p] else 'no'}")
    for name in computed:
        if name not in PAPER_TABLE3:
            differences.append(f"{name}: not in Table 3; computed: {_marks(computed[name])}")
    return {
        "activations": activations,
        "computed": computed,
        "paper_table3": {name: {"row": PAPER_ROW_NAMES[name], **dict(row)}
                         for name, row in PAPER_TABLE3.items()},
        "comparison": comparison,
        "agree_with_paper": all(r["agree"] for r in comparison),
        "differences": differences,
        "criteria": dict(CRITERIA),
        "tolerances": tolerances(np.float64),
        "grid": {"min": float(grid[0]), "max": float(grid[-1]), "points": grid.size, "dtype": "float64"},
        "seed": seed,
    }


_CHECK, _BLANK, _DIFFERS = "✓", "-", "!"


def report(result: dict) -> str:
    """:func:`run`'s result as a table (``✓`` holds, ``-`` does not, [Table 3's mark], ``!`` where they
    differ), one number of evidence per property (:func:`_evidence`), then the differences."""
    computed, paper = result["computed"], result["paper_table3"]
    w = max(len("activation"), *(len(n) for n in computed))
    pw = max(len("(not listed)"), *(len(r["row"]) for r in paper.values()))
    cols = [max(len(PROPERTY_TITLES[p]), 8) for p in PROPERTIES]

    def mark(v):
        return _CHECK if v else _BLANK

    lines = [
        "TanhMax section 4: the four properties, computed for each activation",
        f"({_CHECK} holds, {_BLANK} does not; [paper's Table 3 mark]; "
        f"{_DIFFERS} computed differs from the paper)",
        "",
        f"{'activation':{w}s}  {'Table 3 row':{pw}s}  "
        + "  ".join(f"{PROPERTY_TITLES[p]:{c}s}" for p, c in zip(PROPERTIES, cols)),
        "-" * (w + pw + 4 + sum(cols) + 2 * (len(cols) - 1)),
    ]
    for name, row in computed.items():
        prow = paper.get(name)
        cells = []
        for p, c in zip(PROPERTIES, cols):
            if prow is None:
                cell = f"{mark(row[p])} [ ]"
            else:
                cell = f"{mark(row[p])} [{mark(prow[p])}]" + (_DIFFERS if row[p] != prow[p] else "")
            cells.append(f"{cell:{c}s}")
        label = prow["row"] if prow is not None else "(not listed)"
        lines.append((f"{name:{w}s}  {label:{pw}s}  " + "  ".join(cells)).rstrip())
    lines += ["", *_evidence(result, w), ""]
    if result.get("agree_with_paper", True):
        lines.append("Every row of Table 3 agrees with the computed properties.")
    lines += ["Differences and rows Table 3 lacks:"] + [f"  {d}" for d in result["differences"]]
    return "\n".join(lines)


def _evidence(result, w):
    """One number per property and activation: the smallest relative step of g, the affine residual,
    the bottleneck ranks, the off-diagonal Jacobian share and the odd defect (derivation 06)."""
    lines = ["Evidence (criteria: refattn.theory.properties.CRITERIA; derivations/06-four-properties.md):",
              f"{'activation':{w}s}  {'min rel. step of g':>18s}  {'affine residual':>15s}  "
              f"{'rank mixed/pos. (bound)':>23s}  {'offdiag/diag':>12s}  {'odd defect':>10s}"]
    for name, m in result["activations"].items():
        br = m["log_nonlinearity"]["evidence"].get("bottleneck_rank")
        if br is None:
            ranks = "n/a"
        else:
            r = [str(v["rank"]) if v["applicable"] else "n/a" for v in br["regimes"].values()]
            ranks = f"{'/'.join(r)} ({br['bound']})"
        lines.append(
            f"{name:{w}s}  {m['monotonicity']['evidence']['min_relative_step']:18.2e}  "
            f"{m['log_nonlinearity']['evidence']['relative_affine_residual']:15.2e}  "
            f"{ranks:>23s}  "
            f"{m['contextual_normalisation']['evidence']['max_offdiag_over_diag']:12.2e}  "
            f"{m['origin_symmetry']['evidence']['max_relative_odd_defect']:10.2e}")
    return lines


def plot(result):
    """The table as a picture: each cell coloured by the computed value (blue holds, grey does not),
    with the paper's Table 3 mark as text ("n/a" for activations it does not list) and a red frame
    where the two differ."""
    from matplotlib.colors import ListedColormap  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415
    from matplotlib.patches import Rectangle  # noqa: PLC0415

    names = list(result["computed"])
    C = np.array([[result["computed"][n][p] for p in PROPERTIES] for n in names], dtype=float)  # (A, 4)
    paper_rows = result["paper_table3"]
    fig = Figure(figsize=(6.4, 0.42 * len(names) + 1.2))
    ax = fig.subplots()
    ax.imshow(C, cmap=ListedColormap(["0.85", "#6baed6"]), vmin=0, vmax=1, aspect="auto")
    for i, n in enumerate(names):
        for j, p in enumerate(PROPERTIES):
            paper = paper_rows.get(n)
            text = "n/a" if paper is None else ("paper ✓" if paper[p] else "paper -")
            ax.text(j, i, ("✓ " if C[i, j] else "- ") + f"({text})", ha="center", va="center", fontsize=7)
            if paper is not None and bool(paper[p]) != bool(C[i, j]):
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="red", lw=2))
    ax.set_xticks(range(len(PROPERTIES)), [PROPERTY_TITLES[p] for p in PROPERTIES], fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_title("computed (colour, first mark) vs TanhMax Table 3 (in brackets)", fontsize=9)
    fig.tight_layout()
    return fig
