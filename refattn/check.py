"""The main job: check every hand-derived gradient in the registries.

:func:`run_check` compares, in float64, the analytic VJP of every registered
activation and every registered score function with autograd and with central
differences (:func:`refattn.core.gradcheck.gradcheck`), at random points away from
the documented singular points, and then *at* each documented singular point,
where a disagreement with differences is expected and flagged, not failed.
``refattn check`` prints the result as a table, ``refattn check --json`` as
one JSON object.
"""

from __future__ import annotations

import numpy as np

from .core.activations import ACTIVATIONS, activation
from .core.gradcheck import gradcheck
from .core.scores import SCORES, score

__all__ = ["run_check", "format_table", "TOLERANCE", "activation_gradcheck", "score_gradcheck"]

#: Largest relative error accepted away from singular points.
TOLERANCE = 1e-6
EPS = 1e-6


def activation_gradcheck(activation, s, mask=None, axis=-1, **options):
    """:func:`~refattn.core.gradcheck.gradcheck` of ``act.backward`` at the scores ``s`` (``options`` passed on)."""
    return gradcheck(lambda s: activation(s, axis, mask), {"s": s},
                     lambda u, s: {"s": activation.backward(u, activation.forward(s, axis, mask)[1])}, **options)


def score_gradcheck(sc, q, k, params, **options):
    """:func:`~refattn.core.gradcheck.gradcheck` of ``sc.backward`` in ``q`` (unless ``None``), ``k`` and
    every parameter."""
    names = list(params)
    args = {"k": k, **params} if q is None else {"q": q, "k": k, **params}

    def vjp(u, **a):
        dq, dk, dp = sc.backward(u, sc.forward(a.get("q"), a["k"], {p: a[p] for p in names})[1])
        return {"k": dk, **dp, **({} if q is None else {"q": dq})}

    return gradcheck(lambda **a: sc(a.get("q"), a["k"], {p: a[p] for p in names}), args, vjp, **options)


def away_from_singular(activation, s, margin=1e-2):
    """Move entries of ``s`` within ``margin`` of a documented singular score
    of ``activation`` to distance ``margin``, so central differences do not straddle
    a kink or a jump."""
    for c in activation.singular_scores:
        near = np.abs(s - c) < margin
        s = np.where(near, c + np.where(s >= c, margin, -margin), s)
    return s


def _row(kind, name, results, note="", singular=False):
    ag = [r.worst("autograd") for r in results]
    fd = [r.worst("central") for r in results]
    ag_rel = max(c.max_rel for c in ag)
    fd_rel = max(c.max_rel for c in fd)
    worst_fd = max(fd, key=lambda c: c.max_rel)
    ok = bool(ag_rel <= TOLERANCE and fd_rel <= TOLERANCE)
    return {
        "kind": kind,
        "name": name,
        "autograd_max_rel": float(ag_rel),
        "central_max_rel": float(fd_rel),
        "autograd_max_abs": float(max(c.max_abs for c in ag)),
        "central_max_abs": float(max(c.max_abs for c in fd)),
        "central_worst_arg": worst_fd.arg,
        "central_worst_index": list(worst_fd.where),
        "ok": ok,
        "singular": singular,
        "status": ("ok" if ok else "FAIL") if not singular else
                  ("singular: agrees" if ok else "singular: expected"),
        "note": note,
    }


def _check_activation(name, rng):
    act = activation(name)
    results = []
    for use_mask in (False, True):
        s = away_from_singular(act, 2.0 * rng.standard_normal((3, 7)))
        mask = (rng.random((3, 7)) < 0.8) if use_mask else None
        results.append(activation_gradcheck(act, s, mask, name=name, seed=int(rng.integers(2**31)), eps=EPS,
                                            rtol=TOLERANCE, atol=0.0))
    rows = [_row("activation", name, results, note=act.source)]
    for where, why in act.singular:
        if where == "s = 0":
            s = np.array([0.0, 0.8, -1.1, 1.9, -0.4])
        elif where in ("all-zero row",):
            s = np.zeros(5)
        elif where == "row with no positive score":
            s = np.array([0.0, -0.8, -1.1, -1.9, -0.4])
        else:  # pragma: no cover - a new singular case needs a point here
            raise ValueError(f"{name}: no check point for singular case {where!r}")
        res = activation_gradcheck(act, s, name=name, seed=1, eps=EPS, rtol=TOLERANCE, atol=0.0)
        rows.append(_row("activation", f"{name} @ {where}", [res], note=why, singular=True))
    return rows


def _check_score(name, rng, options=None, label=None, sizes=None):
    sc = score(name, **(options or {}))
    results = []
    for batch in ((), (2,)):
        n_q, n_k, d = 3, (3 if not sc.pairwise else 4), 3
        q = rng.standard_normal(batch + (n_q if sc.pairwise else n_k, d))
        k = rng.standard_normal(batch + (n_k, d))
        params = sc.init_params(d, rng, **(sizes or {}))
        results.append(score_gradcheck(sc, q if sc.uses_q else None, k, params, name=name,
                                       seed=int(rng.integers(2**31)), eps=EPS, rtol=TOLERANCE, atol=0.0))
    return [_row("score", label or name, results, note=sc.source)]


#: Score configurations the check covers beyond each score's defaults.
SCORE_VARIANTS = (
    ("neural", {"hidden": "relu"}, None, "neural (relu hidden)"),
    ("neural", {}, {"per_pair": (3, 4)}, "neural (per-pair weights)"),
    ("scaled_dot", {"beta": 0.7}, None, "scaled_dot (beta = 0.7)"),
)


def run_check(seed: int = 0) -> dict:
    """Check every activation and score; return the results as a dict.

    Returns
    -------
    dict
        ``{"dtype", "eps", "tolerance", "rows": [...], "ok"}``; each row has the
        largest relative (and absolute) error of the analytic VJP against
        autograd and against central differences, and whether it is a
        documented singular point (flagged, not failed).
    """
    rng = np.random.default_rng(seed)
    rows = []
    for name in ACTIVATIONS:
        rows += _check_activation(name, rng)
    for name in SCORES:
        rows += _check_score(name, rng)
    for name, options, sizes, label in SCORE_VARIANTS:
        rows += _check_score(name, rng, options, label, sizes)
    ok = all(r["ok"] for r in rows if not r["singular"])
    return {"dtype": "float64", "eps": EPS, "tolerance": TOLERANCE, "seed": seed,
            "rows": rows, "ok": ok}


def format_table(result: dict) -> str:
    """The result of :func:`run_check` as a plain-text table."""
    head = (f"refattn check: hand-derived VJPs vs autograd and central differences "
            f"(float64, eps={result['eps']:g}; pass: max relative error <= {result['tolerance']:g})")
    lines = [head, ""]
    w = max(len(r["name"]) for r in result["rows"])
    lines.append(f"{'kind':10s}  {'name':{w}s}  {'vs autograd':>11s}  {'vs central':>11s}  status")
    lines.append("-" * (w + 54))
    for r in result["rows"]:
        lines.append(f"{r['kind']:10s}  {r['name']:{w}s}  {r['autograd_max_rel']:11.2e}  "
                     f"{r['central_max_rel']:11.2e}  {r['status']}")
    lines.append("")
    sing = [r for r in result["rows"] if r["singular"]]
    if sing:
        lines.append("Documented singular points (differences are not expected to agree there):")
        for r in sing:
            lines.append(f"  {r['name']}: {r['note']}")
    n_bad = sum(1 for r in result["rows"] if not r["singular"] and not r["ok"])
    lines.append("")
    lines.append("all checks passed" if result["ok"] else f"{n_bad} check(s) FAILED")
    return "\n".join(lines)
