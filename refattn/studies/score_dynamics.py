r"""Proposition 1 against training: measured score changes per step vs predicted velocity.

Issue 4, item 5. Plain gradient descent with step ``eta`` on the empirical risk
of :class:`refattn.theory.proposition1.OneLayerModel` (full batch, synthetic polarity
sentences from :mod:`refattn.training.tasks.polarity`) moves every token's score by
``Delta s = s(theta - eta grad R) - s(theta)``. Gradient flow is the limit
``eta -> 0``, so

    Delta s / eta = ds/dtau + O(eta).

* :func:`step_check` measures ``Delta s / eta`` for a range of step sizes and
  compares it with Proposition 1's prediction (``formula_velocity``, Eq. 03.P' of
  ``derivations/03-proposition-1.md``) and with the exact velocity ``-J grad R``.
  With free per-token ``Q, K`` (the proposition's assumption) both errors
  shrink like ``eta``; with shared projections the error against the
  proposition stops at the size of the neglected cross terms (03.P7), while the
  error against ``-J grad R`` still shrinks like ``eta``.
* :func:`trajectories` trains for many small steps and integrates the predicted
  velocity along the actual parameter path, ``s_pred(t+1) = s_pred(t) +
  eta v(theta_t)``, next to the measured scores, averaged per token group
  (positive, negative, neutral).

The derivation is ``derivations/12-score-dynamics-experiment.md``.
"""

from __future__ import annotations

import math

import numpy as np
from autograd import grad

from ..theory.proposition1 import OneLayerModel, velocity_decomposition
from ..training.tasks.polarity import NEGATIVE, NEUTRAL, POSITIVE, PolarityConfig, make_polarity

__all__ = ["DYNAMICS_DATA", "step_check", "trajectories", "run_dynamics", "format_dynamics"]

#: A small polarity task: 8 positive, 8 negative, 32 neutral tokens; 2 polar +
#: 4 neutral tokens per sentence; 150 sentences per class.
DYNAMICS_DATA = PolarityConfig(n_pos=8, n_neg=8, n_neutral=32, polar_per_sentence=2,
                               neutral_per_sentence=4, n_per_class=150, seed=0)


def _setup(kind, act, seed, data, d, dv):
    ds = make_polarity(data)
    tokens = ds.tokens[ds.train_idx].astype(np.int64)
    target = ds.labels[ds.train_idx].astype(float)
    scale = math.sqrt(d) if kind != "global" else 1.0
    model = OneLayerModel(kind, act, "sigmoid", "bce", scale)
    params = model.init_params(ds.vocab_size, d, dv, np.random.default_rng(seed))
    return model, params, tokens, target, ds.group


def _step(params, g, eta):
    return {k: v - eta * g[k] for k, v in params.items()}


def _rel(a, ref):
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


def step_check(kind="free", act="tanhmax", *, etas=(1e-1, 1e-2, 1e-3, 1e-4), seed=0, data=DYNAMICS_DATA,
               d=4, dv=4):
    """Relative error of ``Delta s / eta`` against Proposition 1 and against ``-J grad R``.

    Returns a dict with ``etas`` and, per step size, ``vs_prop1`` and
    ``vs_exact`` (norm-wise relative errors over the tokens that occur), plus
    ``cross_terms`` (the size of 03.P7's neglected terms at the start, relative
    to the exact velocity) and the fraction of tokens whose measured score
    change has the sign Proposition 1 predicts at the smallest step.
    """
    if not etas or any(not (isinstance(e, (int, float)) and e > 0) for e in etas):
        raise ValueError(f"etas: expected positive step sizes, got {etas!r}")
    model, params, tokens, target, _ = _setup(kind, act, seed, data, d, dv)
    r = velocity_decomposition(model, params, tokens, target)
    m = r["present"]
    g = grad(lambda p: model.risk(p, tokens, target))(params)
    s0 = model.vocab_scores(params)
    out = {"kind": kind, "activation": act, "etas": list(map(float, etas)), "vs_prop1": [], "vs_exact": []}
    for eta in etas:
        measured = (model.vocab_scores(_step(params, g, eta)) - s0) / eta
        out["vs_prop1"].append(_rel(measured[m], r["formula"][m]))
        out["vs_exact"].append(_rel(measured[m], r["exact"][m]))
    moving = m & (np.abs(measured) > 1e-9 * np.max(np.abs(measured)))
    out["sign_agreement"] = float(np.mean(np.sign(measured[moving]) == np.sign(r["formula"][moving])))
    out["cross_terms"] = _rel(r["diagonal"][m], r["exact"][m])  # 03.P7's neglected terms; 0 for "free"
    return out


def trajectories(kind="free", act="tanhmax", *, steps=200, eta=0.05, seed=0, data=DYNAMICS_DATA, d=4, dv=4,
                 record_every=1):
    """Train by full-batch gradient descent; record measured and predicted scores.

    The prediction integrates Proposition 1's velocity along the actual
    parameter path: ``s_pred(t+1) = s_pred(t) + eta * formula_velocity(theta_t)``.

    Returns
    -------
    dict
        ``step`` (recorded steps), ``measured`` and ``predicted`` (arrays
        ``(n_records, T)``), ``group`` (each token's true group), ``present``,
        ``risk`` per recorded step, and the group means of both.
    """
    if not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"steps: expected a positive integer, got {steps!r}")
    if not (isinstance(eta, (int, float)) and eta > 0):
        raise ValueError(f"eta: expected a positive step size, got {eta!r}")
    model, params, tokens, target, group = _setup(kind, act, seed, data, d, dv)
    g_of = grad(lambda p: model.risk(p, tokens, target))
    s_pred = np.array(model.vocab_scores(params))
    rec = {"step": [], "measured": [], "predicted": [], "risk": []}
    for t in range(steps + 1):
        s = model.vocab_scores(params)
        if t % record_every == 0 or t == steps:
            rec["step"].append(t)
            rec["measured"].append(np.array(s))
            rec["predicted"].append(s_pred.copy())
            rec["risk"].append(float(model.risk(params, tokens, target)))
        if t == steps:
            break
        s_pred = s_pred + eta * model.formula_velocity(params, tokens, target)
        params = _step(params, g_of(params), eta)
    out = {k: np.array(v) for k, v in rec.items()}
    present = np.bincount(tokens.ravel(), minlength=len(group)) > 0
    out.update(group=group, present=present, kind=kind, activation=act, eta=eta)
    for name, code in (("positive", POSITIVE), ("negative", NEGATIVE), ("neutral", NEUTRAL)):
        sel = present & (group == code)
        out[f"measured_{name}"] = out["measured"][:, sel].mean(axis=1)
        out[f"predicted_{name}"] = out["predicted"][:, sel].mean(axis=1)
    out["final_rel_gap"] = _rel(out["predicted"][-1][present] - out["predicted"][0][present],
                                out["measured"][-1][present] - out["measured"][0][present])
    return out


def run_dynamics(*, activations=("softmax", "tanhmax"), kinds=("free", "shared"), steps=400, eta=0.5,
                 etas=(1e-1, 1e-2, 1e-3, 1e-4), seed=0, return_raw=False):
    """Everything ``refattn dynamics`` reports, as plain data (JSON-able).

    With ``return_raw`` the full :func:`step_check` and :func:`trajectories`
    results (arrays, for the figures) are returned too, as ``(summary, raw)``.
    """
    rows, raw = [], []
    for act in activations:
        for kind in kinds:
            sc = step_check(kind, act, etas=etas, seed=seed)
            tr = trajectories(kind, act, steps=steps, eta=eta, seed=seed)
            groups = ("positive", "negative", "neutral")
            rows.append({
                "activation": act, "kind": kind,
                "etas": sc["etas"], "vs_prop1": sc["vs_prop1"], "vs_exact": sc["vs_exact"],
                "sign_agreement": sc["sign_agreement"], "cross_terms": sc["cross_terms"],
                "trajectory_rel_gap": tr["final_rel_gap"], "steps": steps, "eta": eta,
                "risk_start": float(tr["risk"][0]), "risk_end": float(tr["risk"][-1]),
                "final_mean_score": {g: float(tr[f"measured_{g}"][-1]) for g in groups},
                "final_mean_score_predicted": {g: float(tr[f"predicted_{g}"][-1]) for g in groups},
            })
            raw.append({"step_check": sc, "trajectories": tr})
    summary = {"seed": seed,
               "data": {"n_pos": DYNAMICS_DATA.n_pos, "n_neg": DYNAMICS_DATA.n_neg,
                        "n_neutral": DYNAMICS_DATA.n_neutral, "n_per_class": DYNAMICS_DATA.n_per_class,
                        "polar_per_sentence": DYNAMICS_DATA.polar_per_sentence,
                        "neutral_per_sentence": DYNAMICS_DATA.neutral_per_sentence},
               "rows": rows}
    return (summary, raw) if return_raw else summary


def format_dynamics(result):
    """``run_dynamics``'s summary as a text table."""
    etas = result["rows"][0]["etas"]
    head = "  ".join(f"eta={e:g}" for e in etas)
    lines = ["Proposition 1 against gradient descent: rel. error of (measured score change)/eta",
             f"columns: step sizes {head}; 'prop1' = against Eq. 4, 'exact' = against -J grad R",
             ""]
    for r in result["rows"]:
        p1 = " ".join(f"{x:8.1e}" for x in r["vs_prop1"])
        ex = " ".join(f"{x:8.1e}" for x in r["vs_exact"])
        lines.append(f"{r['activation']:<8} {r['kind']:<6} prop1 {p1} | exact {ex} | sign {r['sign_agreement']:.2f} "
                     f"| trajectory gap {r['trajectory_rel_gap']:.1e} ({r['steps']} steps, eta {r['eta']:g})")
    return "\n".join(lines)
