r"""Proposition 1 of TanhMax (Eq. 4) checked for every activation: ``refattn prop1``.

For every registered activation and every (output, loss) pair of
:data:`refattn.theory.proposition1.SETTINGS`, the one-layer model of the
proposition (:class:`refattn.theory.proposition1.OneLayerModel`) is drawn at
random and the score velocity of Eq. 4 is compared with the exact gradient-flow
velocity from autograd (:func:`refattn.theory.proposition1.velocity_decomposition`):

* ``free`` (the proposition's assumption: ``Q_i, K_i`` free per-token
  parameters): the largest relative error, which must be rounding only
  (:data:`TOLERANCE`);
* ``shared`` (TanhMax's public code) and ``global`` (Sun & Lu's learned
  global query): how large the cross terms the proposition neglects are, and
  how often the formula still gets the sign of a token's velocity right.

The derivation is ``derivations/03-proposition-1.md``; the mathematics lives
in :mod:`refattn.theory.proposition1`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.activations import ACTIVATIONS
from ..theory.proposition1 import SETTINGS, OneLayerModel, velocity_decomposition
from ..custom import activation_label
from . import StudySettings, activation_option, option, resolve_activation

__all__ = ["TOLERANCE", "Settings", "run", "report", "plot", "status"]

#: Proposition 1 under its assumption must match autograd to this relative error.
TOLERANCE = 1e-10

#: The figure ``refattn prop1 --out DIR`` writes.
FIGURE = "prop1.png"

#: Sizes of the random batch: T tokens in the vocabulary, N instances of n tokens, widths d (Q, K) and dv (V).
SIZES = {"T": 12, "N": 6, "n": 5, "d": 4, "dv": 3}


@dataclass
class Settings(StudySettings):
    """Proposition 1 (TanhMax, Eq. 4) for every activation: error against the exact gradient-flow velocity,
    and the cross terms under shared projections.

    ``activations`` picks some (names or ``FILE.py:NAME``); by default every registered one."""

    seed: int = option(0, "seed of the random model and batch", low=0)
    activations: tuple[str, ...] | None = activation_option(None, "comma-separated activations (default: every "
                                                                  "registered activation)")


def _rel(a, ref):
    scale = float(np.max(np.abs(ref)))
    return float(np.max(np.abs(a - ref))) / scale if scale > 0 else float(np.max(np.abs(a)))


def _batch(rng, T, N, n, loss):
    """Instances drawn from a vocabulary of T tokens: tokens repeat across
    instances (and sometimes within one)."""
    tokens = rng.integers(0, T, size=(N, n))
    target = rng.integers(0, 2, size=N).astype(float) if loss == "bce" else rng.standard_normal(N)
    return tokens, target


def run(settings):
    r"""Proposition 1 checked for every activation.

    For every registered activation and every (output, loss) in
    :data:`refattn.theory.proposition1.SETTINGS`:

    * ``free``: the largest relative error (norm-wise, ``max|formula - exact| /
      max|exact|``) of Eq. 4 against the exact autograd velocity, on a batch of
      ``N`` instances of length ``n`` drawn from ``T`` tokens (:data:`SIZES`; so
      tokens are shared across instances); must be <= :data:`TOLERANCE`;
    * ``shared`` and ``global``: how large the neglected cross terms are,
      ``max|exact - diagonal| / max|exact|``, the relative error of the paper's
      formula, and the fraction of tokens whose velocity has the sign the
      formula predicts.
    """
    T, N, n, d, dv = (SIZES[k] for k in ("T", "N", "n", "d", "dv"))
    rng0 = np.random.default_rng(settings.seed)
    rows = []
    chosen = ACTIVATIONS if settings.activations is None else settings.activations
    chosen = {activation_label(v): resolve_activation(v, "activations") for v in chosen}  # every one loaded first
    for name, act in chosen.items():  # an Activation of yours too
        row = {"activation": name, "settings": []}
        for output, loss in SETTINGS:
            rng = np.random.default_rng(rng0.integers(2 ** 32))
            tokens, target = _batch(rng, T, N, n, loss)
            entry = {"output": output, "loss": loss}
            for kind, scale in (("free", math.sqrt(d)), ("shared", math.sqrt(d)), ("global", 1.0)):
                model = OneLayerModel(kind, act, output, loss, scale)
                params = model.init_params(T, d, dv, rng)
                r = velocity_decomposition(model, params, tokens, target)
                m = r["present"]
                ex = r["exact"]
                if kind == "free":
                    entry["free_max_rel_error"] = _rel(r["formula"][m], ex[m])
                    entry["free_max_rel_error_all_tokens"] = _rel(r["formula"], ex)
                    entry["free_dR_ds_max_rel_error"] = _rel(r["dR_ds_formula"], r["dR_ds"])
                else:
                    moving = m & (np.abs(ex) > 1e-12 * np.max(np.abs(ex)))
                    entry[kind] = {
                        "cross_terms_rel": _rel(ex - r["diagonal"], ex) if np.any(ex) else 0.0,
                        "token_cross_rel": _rel(r["cross"], ex) if np.any(ex) else 0.0,
                        "other_path_rel": _rel(r["other"], ex) if np.any(ex) else 0.0,
                        "formula_rel_error": _rel(r["formula"], ex) if np.any(ex) else 0.0,
                        "sign_agreement": float(np.mean(np.sign(r["formula"][moving]) == np.sign(ex[moving])))
                        if np.any(moving) else 1.0,
                    }
            row["settings"].append(entry)
        row["free_max_rel_error"] = max(e["free_max_rel_error"] for e in row["settings"])
        for kind in ("shared", "global"):
            row[f"{kind}_cross_terms_rel"] = max(e[kind]["cross_terms_rel"] for e in row["settings"])
            row[f"{kind}_sign_agreement"] = min(e[kind]["sign_agreement"] for e in row["settings"])
        row["ok"] = bool(row["free_max_rel_error"] <= TOLERANCE)
        rows.append(row)
    return {
        "tolerance": TOLERANCE,
        "seed": settings.seed,
        "sizes": dict(SIZES),
        "rows": rows,
        "ok": all(r["ok"] for r in rows),
    }


def report(result):
    """:func:`run`'s result as a text table."""
    lines = [
        f"Proposition 1 (TanhMax, Eq. 4) vs the exact gradient-flow velocity (autograd), "
        f"float64, seed {result['seed']}, sizes {result['sizes']}",
        "free: Q_i, K_i free per-token parameters (the proposition's assumption), max relative error;",
        "shared / global: TanhMax's code / Sun & Lu's global query, size of the neglected cross terms "
        "relative to the exact velocity, and the fraction of tokens whose velocity sign the formula gets right.",
        "",
        f"{'activation':<11} {'free err':>9} {'shared cross':>13} {'shared sign':>12} "
        f"{'global cross':>13} {'global sign':>12}  status",
    ]
    for r in result["rows"]:
        lines.append(
            f"{r['activation']:<11} {r['free_max_rel_error']:9.1e} {r['shared_cross_terms_rel']:13.2f} "
            f"{r['shared_sign_agreement']:12.2f} {r['global_cross_terms_rel']:13.2f} "
            f"{r['global_sign_agreement']:12.2f}  {'ok' if r['ok'] else 'FAIL'}"
        )
    lines.append("")
    lines.append("all within tolerance" if result["ok"] else
                 f"FAILED: some activation exceeds {result['tolerance']:g}")
    return "\n".join(lines)


def plot(result):
    """Per activation, the relative error of Eq. 4 (log scale): under its assumption (rounding,
    below the tolerance line) and with shared projections or a global query (the cross terms)."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    names = [r["activation"] for r in result["rows"]]
    x = np.arange(len(names))
    fig = Figure(figsize=(max(6.0, 0.7 * len(names)), 3.4))
    ax = fig.subplots()
    floor = 1e-17  # an exact 0 drawn at the bottom of the log axis
    for k, (key, label) in enumerate((("free_max_rel_error", "free Q, K: error of Eq. 4"),
                                      ("shared_cross_terms_rel", "shared projections: cross terms"),
                                      ("global_cross_terms_rel", "global query: cross terms"))):
        ax.bar(x + (k - 1) * 0.27, [max(r[key], floor) for r in result["rows"]], 0.27, label=label)
    ax.axhline(result["tolerance"], color="k", ls=":", lw=1, label=f"tolerance {result['tolerance']:g}")
    ax.set_yscale("log")
    ax.set_xticks(x, names, rotation=30, fontsize=8)
    ax.set_ylabel("relative to the exact velocity")
    ax.set_title(f"Proposition 1 against autograd (seed {result['seed']})", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def status(result):
    """Exit code of ``refattn prop1``: 1 when some activation misses the tolerance."""
    return 0 if result["ok"] else 1
