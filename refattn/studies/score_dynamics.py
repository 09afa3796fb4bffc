r"""Proposition 1 against training: measured score changes per step vs predicted velocity.

``refattn dynamics``. :func:`gradient_descent` is the tiny trainer: plain full-batch
gradient descent with step ``eta`` on the empirical risk of
:class:`refattn.theory.proposition1.OneLayerModel` (synthetic polarity sentences from
:mod:`refattn.training.tasks.polarity`), which moves every token's score by
``Delta s = s(theta - eta grad R) - s(theta)``; gradient flow is the limit
``eta -> 0``, ``Delta s / eta = ds/dtau + O(eta)``. :func:`step_check` compares
``Delta s / eta`` with Proposition 1's velocity (Eq. 03.P') and the exact ``-J grad R``;
:func:`trajectories` integrates the predicted velocity along the trainer's path
(``derivations/12-score-dynamics-experiment.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from autograd import grad

from ..plots import GROUP_COLOURS
from ..theory.proposition1 import OneLayerModel, velocity_decomposition
from ..training.tasks.polarity import NEGATIVE, NEUTRAL, POSITIVE, PolarityConfig, make_polarity
from ..custom import activation_label
from . import StudySettings, activation_option, model_activation, option

__all__ = ["DYNAMICS_DATA", "KINDS", "ETAS", "Settings", "descent_step", "gradient_descent", "step_check",
           "trajectories", "run", "report", "plot"]

#: A small polarity task: 8 positive, 8 negative, 32 neutral tokens; 2 polar +
#: 4 neutral tokens per sentence; 150 sentences per class.
DYNAMICS_DATA = PolarityConfig(n_pos=8, n_neg=8, n_neutral=32, polar_per_sentence=2,
                               neutral_per_sentence=4, n_per_class=150, seed=0)

#: The parameterisations compared: free per-token Q, K (Proposition 1's assumption) and shared projections.
KINDS = ("free", "shared")

#: The step sizes of :func:`step_check`.
ETAS = (1e-1, 1e-2, 1e-3, 1e-4)

#: The figure ``refattn dynamics --out DIR`` writes.
FIGURE = "score_dynamics.png"

#: At most about this many points of each trajectory are kept in the result (for the figure).
TRAJECTORY_POINTS = 100


@dataclass
class Settings(StudySettings):
    """Proposition 1 against gradient descent on synthetic polarity data (the tiny trainer,
    score_dynamics.gradient_descent): measured score change per step vs the predicted velocity."""

    activations: tuple[str, ...] = activation_option(("softmax", "tanhmax"), "comma-separated activations")
    seed: int = option(0, "seed of the data and the initialisation", low=0)
    steps: int = option(400, "gradient steps of the trajectories", low=1)
    eta: float = option(0.5, "step size of the trajectories", positive=True)


def _setup(kind, act, seed, data, d, dv):
    ds = make_polarity(data)
    tokens = ds.tokens[ds.train_idx].astype(np.int64)
    target = ds.labels[ds.train_idx].astype(float)
    scale = math.sqrt(d) if kind != "global" else 1.0
    model = OneLayerModel(kind, act, "sigmoid", "bce", scale)
    params = model.init_params(ds.vocab_size, d, dv, np.random.default_rng(seed))
    return model, params, tokens, target, ds.group


def descent_step(params, g, eta):
    """One step of gradient descent, ``theta - eta g`` for every parameter."""
    return {k: v - eta * g[k] for k, v in params.items()}


def gradient_descent(risk, params, *, eta, steps):
    """The tiny trainer: ``steps`` steps of full-batch gradient descent on ``risk(params)``,
    ``theta <- theta - eta grad R(theta)`` with autograd's gradient (TanhMax section 5;
    ``derivations/12-score-dynamics-experiment.md``, section 2). Yields the parameters before
    every step and after the last, ``steps + 1`` of them; no checkpoints, locks or files."""
    g = grad(risk)
    for _ in range(steps):
        yield params
        params = descent_step(params, g(params), eta)
    yield params


def _rel(a, ref):
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


def step_check(kind="free", activation="tanhmax", *, etas=ETAS, seed=0, data=DYNAMICS_DATA, d=4, dv=4):
    """Relative error of ``Delta s / eta`` against Proposition 1 and against ``-J grad R``, per step size.

    Returns ``etas``, ``vs_prop1`` and ``vs_exact`` (norm-wise relative errors over the tokens that
    occur), ``cross_terms`` (03.P7's neglected terms at the start, relative to the exact velocity)
    and ``sign_agreement`` (the tokens whose score moves the way Proposition 1 says, at the last step size).
    """
    model, params, tokens, target, _ = _setup(kind, activation, seed, data, d, dv)
    r = velocity_decomposition(model, params, tokens, target)
    m = r["present"]
    g = grad(lambda p: model.risk(p, tokens, target))(params)
    s0 = model.vocab_scores(params)
    out = {"kind": kind, "activation": activation_label(activation), "etas": list(map(float, etas)), "vs_prop1": [],
           "vs_exact": []}
    for eta in etas:
        measured = (model.vocab_scores(descent_step(params, g, eta)) - s0) / eta
        out["vs_prop1"].append(_rel(measured[m], r["formula"][m]))
        out["vs_exact"].append(_rel(measured[m], r["exact"][m]))
    moving = m & (np.abs(measured) > 1e-9 * np.max(np.abs(measured)))
    out["sign_agreement"] = float(np.mean(np.sign(measured[moving]) == np.sign(r["formula"][moving])))
    out["cross_terms"] = _rel(r["diagonal"][m], r["exact"][m])  # 03.P7's neglected terms; 0 for "free"
    return out


def trajectories(kind="free", activation="tanhmax", *, steps=200, eta=0.05, seed=0, data=DYNAMICS_DATA, d=4, dv=4,
                 record_every=1):
    """Train with :func:`gradient_descent`; record the measured scores and Proposition 1's prediction
    integrated along the same path, ``s_pred(t+1) = s_pred(t) + eta formula_velocity(theta_t)``.

    Returns ``step``, ``measured`` and ``predicted`` ``(records, T)``, ``risk``, ``group``, ``present``,
    their group means (``measured_positive``, ...) and ``final_rel_gap``.
    """
    model, params, tokens, target, group = _setup(kind, activation, seed, data, d, dv)
    s_pred = np.array(model.vocab_scores(params))
    rec = {"step": [], "measured": [], "predicted": [], "risk": []}
    for t, p in enumerate(gradient_descent(lambda q: model.risk(q, tokens, target), params, eta=eta, steps=steps)):
        if t % record_every == 0 or t == steps:
            rec["step"].append(t)
            rec["measured"].append(np.array(model.vocab_scores(p)))
            rec["predicted"].append(s_pred.copy())
            rec["risk"].append(float(model.risk(p, tokens, target)))
        if t < steps:
            s_pred = s_pred + eta * model.formula_velocity(p, tokens, target)
    out = {k: np.array(v) for k, v in rec.items()}
    present = np.bincount(tokens.ravel(), minlength=len(group)) > 0
    out.update(group=group, present=present, kind=kind, activation=activation_label(activation), eta=eta)
    for name, code in (("positive", POSITIVE), ("negative", NEGATIVE), ("neutral", NEUTRAL)):
        sel = present & (group == code)
        out[f"measured_{name}"] = out["measured"][:, sel].mean(axis=1)
        out[f"predicted_{name}"] = out["predicted"][:, sel].mean(axis=1)
    out["final_rel_gap"] = _rel(out["predicted"][-1][present] - out["predicted"][0][present],
                                out["measured"][-1][present] - out["measured"][0][present])
    return out


def run(settings):
    """Everything ``refattn dynamics`` reports, as plain data (JSON-able).

    One row per activation and parameterisation (:data:`KINDS`): the
    :func:`step_check` errors at :data:`ETAS`, and a :func:`trajectories` run
    of ``settings.steps`` steps of size ``settings.eta`` with its group means
    (about :data:`TRAJECTORY_POINTS` recorded steps, first and last included)
    under ``trajectory``.
    """
    steps, eta, seed = settings.steps, settings.eta, settings.seed
    groups = ("positive", "negative", "neutral")
    every = max(1, steps // TRAJECTORY_POINTS)
    rows = []
    given = {activation_label(v): model_activation(v) for v in settings.activations}  # every one loaded first
    for label, act in given.items():  # a name as itself; an activation of yours loaded, diverging as data
        for kind in KINDS:
            sc = step_check(kind, act, etas=ETAS, seed=seed)
            tr = trajectories(kind, act, steps=steps, eta=eta, seed=seed, record_every=every)
            rows.append({
                "activation": label, "kind": kind,
                "etas": sc["etas"], "vs_prop1": sc["vs_prop1"], "vs_exact": sc["vs_exact"],
                "sign_agreement": sc["sign_agreement"], "cross_terms": sc["cross_terms"],
                "trajectory_rel_gap": tr["final_rel_gap"], "steps": steps, "eta": eta,
                "risk_start": float(tr["risk"][0]), "risk_end": float(tr["risk"][-1]),
                "final_mean_score": {g: float(tr[f"measured_{g}"][-1]) for g in groups},
                "final_mean_score_predicted": {g: float(tr[f"predicted_{g}"][-1]) for g in groups},
                "trajectory": {"step": tr["step"].tolist(),
                               "measured": {g: tr[f"measured_{g}"].tolist() for g in groups},
                               "predicted": {g: tr[f"predicted_{g}"].tolist() for g in groups}},
            })
    return {"seed": seed,
            "data": {"n_pos": DYNAMICS_DATA.n_pos, "n_neg": DYNAMICS_DATA.n_neg,
                     "n_neutral": DYNAMICS_DATA.n_neutral, "n_per_class": DYNAMICS_DATA.n_per_class,
                     "polar_per_sentence": DYNAMICS_DATA.polar_per_sentence,
                     "neutral_per_sentence": DYNAMICS_DATA.neutral_per_sentence},
            "rows": rows}


def report(result):
    """:func:`run`'s result as a text table."""
    etas = result["rows"][0]["etas"]
    head = "  ".join(f"eta={e:g}" for e in etas)
    lines = ["Proposition 1 against gradient descent (the tiny trainer, refattn.studies.score_dynamics."
             "gradient_descent): rel. error of (measured score change)/eta",
             f"columns: step sizes {head}; 'prop1' = against Eq. 4, 'exact' = against -J grad R",
             ""]
    for r in result["rows"]:
        p1 = " ".join(f"{x:8.1e}" for x in r["vs_prop1"])
        ex = " ".join(f"{x:8.1e}" for x in r["vs_exact"])
        lines.append(f"{r['activation']:<8} {r['kind']:<6} prop1 {p1} | exact {ex} | sign {r['sign_agreement']:.2f} "
                     f"| trajectory gap {r['trajectory_rel_gap']:.1e} ({r['steps']} steps, eta {r['eta']:g})")
    return "\n".join(lines)


def plot(result):
    """Predicted (Proposition 1, integrated) vs measured mean score per token group, one panel per
    (activation, parameterisation), and below each the step-size check."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    rows = result["rows"]
    n = len(rows)
    fig = Figure(figsize=(3.4 * n, 6.2))
    axes = fig.subplots(2, n, squeeze=False)
    for j, r in enumerate(rows):
        tr = r["trajectory"]
        ax = axes[0, j]
        for g, colour in GROUP_COLOURS.items():
            ax.plot(tr["step"], tr["measured"][g], color=colour, label=f"{g}: measured")
            ax.plot(tr["step"], tr["predicted"][g], color=colour, ls="--", label=f"{g}: Prop. 1")
        ax.set_title(f"{r['activation']}, {r['kind']} Q, K", fontsize=9)
        ax.set_xlabel("gradient step")
        ax = axes[1, j]
        ax.loglog(r["etas"], r["vs_prop1"], "o-", label="vs Proposition 1")
        ax.loglog(r["etas"], r["vs_exact"], "s--", label="vs $-J\\nabla R$")
        ax.set_xlabel("step size $\\eta$")
    axes[0, 0].set_ylabel("mean token score")
    axes[1, 0].set_ylabel("rel. error of $\\Delta s/\\eta$")
    axes[0, 0].legend(fontsize=6)
    axes[1, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig
