"""The main job: check every hand-derived gradient in the registries.

:func:`run_check` compares, in float64, the analytic VJP of every registered
activation and every registered score function with autograd and with central
differences (:func:`refattn.core.gradcheck.gradcheck`), at random points away from
the documented singular points, and then *at* each documented singular point,
where a disagreement with central differences is expected and excused, while
the analytic VJP must still agree with autograd's (a singular point excuses
the differences, never a wrong derivative).
``refattn check`` prints the result as a table, ``refattn check --json`` as
one JSON object.

For an activation of your own (``refattn check --activation FILE.py:NAME``,
:func:`check_activation`) the same checks run, and more: each hand-given
derivative against autograd's, point by point over a range you may widen
(``--range LO,HI``), at each declared singular score with the one-sided
slopes there; the VJP at scores spread over that range; in float32 against
float64 with a tolerance from float32's rounding (``--dtype float32``,
:func:`float32_rows`); and a picture of its weights and gradient beside
softmax's (``--plot DIR``, :func:`plot_activation`). The Verify page
(``docs/verify.md``) walks through it.
"""

from __future__ import annotations

import copy

import numpy as np

from .core.activations import BUILT_INS, Activation, activation
from .core.gradcheck import gradcheck
from .core.scores import SCORES, score

__all__ = ["run_check", "format_table", "TOLERANCE", "activation_gradcheck", "score_gradcheck", "check_activation",
           "run_check_file", "format_activation", "float32_rows", "plot_activation", "check_options"]

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


def _row(kind, name, results, note="", singular=False, reason=None):
    """One row of the table from :class:`~refattn.core.gradcheck.GradcheckResult` s. A row passes when
    every comparison passes gradcheck's own test (``max |analytic - reference| <= atol + TOLERANCE *
    max|reference| + rounding bound``). At a singular point only central differences are excused:
    the analytic VJP must still agree with autograd's (``derivations/09-signexp-at-zero.md``). A row
    that fails says why (``reason``: the first failing comparison, where and by how much); ``reason``
    given names what was not judged and why."""
    ag = [c for c in (r.worst("autograd") for r in results) if c is not None]
    fd = [c for c in (r.worst("central") for r in results) if c is not None]
    nan = float("nan")
    worst_fd = max(fd, key=lambda c: c.max_rel) if fd else None
    ag_ok = all(c.ok for r in results for c in r.comparisons if c.check == "autograd")
    fd_ok = all(c.ok for r in results for c in r.comparisons if c.check == "central")
    ok = bool(ag_ok and (fd_ok or singular))
    if singular:
        status = ("singular: agrees" if fd_ok else "singular: differences excused") if ag_ok else             "singular: FAIL vs autograd"
    else:
        status = "ok" if ok else "FAIL"
    failed = [r.describe_failures().splitlines()[0] for r in results if not r.ok and (not singular or not ag_ok)]
    reasons = [x for x in (reason, failed[0] if failed and not ok else None) if x]
    return {
        "kind": kind,
        "name": name,
        "autograd_max_rel": float(max((c.max_rel for c in ag), default=nan)),
        "central_max_rel": float(max((c.max_rel for c in fd), default=nan)),
        "autograd_max_abs": float(max((c.max_abs for c in ag), default=nan)),
        "central_max_abs": float(max((c.max_abs for c in fd), default=nan)),
        "central_worst_arg": None if worst_fd is None else worst_fd.arg,
        "central_worst_index": [] if worst_fd is None else list(worst_fd.where),
        "ok": ok,
        "singular": singular,
        "status": status,
        "note": note,
        "reason": "; ".join(reasons) or None,
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
        documented singular point (where central differences are excused, autograd's agreement is not).
    """
    rng = np.random.default_rng(seed)
    rows = []
    for name in BUILT_INS:
        rows += _check_activation(name, rng)
    for name in SCORES:
        rows += _check_score(name, rng)
    for name, options, sizes, label in SCORE_VARIANTS:
        rows += _check_score(name, rng, options, label, sizes)
    ok = all(r["ok"] for r in rows)
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
        lines.append("Documented singular points (central differences are excused there; the analytic VJP "
                     "still agrees with autograd):")
        for r in sing:
            lines.append(f"  {r['name']}: {r['note']}")
    n_bad = sum(1 for r in result["rows"] if not r["ok"])
    lines.append("")
    lines.append("all checks passed" if result["ok"] else f"{n_bad} check(s) FAILED")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# An activation of your own: refattn check --activation FILE.py:NAME
# --------------------------------------------------------------------------

#: Unit roundoff of float32, ``2^-24``: what the float32 check's tolerance is made of.
FLOAT32_ROUNDOFF = 2.0 ** -24

#: Roundings each entry meets beyond the row's sums in the float32 forward and VJP, with room for a
#: user's ``g`` and ``h`` of a dozen operations each (:func:`float32_rows`).
FLOAT32_OPERATIONS = 64


def _hand_derivatives(act, x):
    """The derivative reports of ``act`` at the points ``x``: ``dg``, ``dh`` of a user's activation
    (:func:`refattn.custom.derivative_reports`), ``drho``, ``dell`` of an Activation subclass
    against autograd's derivatives of its ``rho`` and ``ell``. ``(reports, error)``."""
    from .custom import UserActivation, compare_derivative, derivative_reports, evaluation_checks  # noqa: PLC0415

    try:
        if isinstance(act, UserActivation):
            f = act.functions
            evaluation_checks(f["g"], f["h"], x)
            return derivative_reports(f["g"], f["h"], f["dg"], f["dh"], x, act.singular_scores), None
        with np.errstate(all="ignore"):
            rho = act.rho if type(act).rho is not Activation.rho else None  # rho = 1: nothing to compare
            ell = act.ell
            keep = x[np.isfinite(ell(x))]  # ell = -inf where h = 0: no derivative to compare
        out = [] if rho is None else [compare_derivative(act.drho, rho, x, singular_scores=act.singular_scores,
                                                         role="drho", frole="rho")]
        out.append(compare_derivative(act.dell, ell, keep, singular_scores=act.singular_scores, role="dell",
                                      frole="ell"))
        return out, None
    except ValueError as exc:
        return [], str(exc).splitlines()[0]


def _vjp_rows(act, rng, check_range):
    """The VJP against autograd and central differences: random rows, masked rows, rows spread over
    ``check_range``, then a row through each declared singular score (differences excused); each judged
    with the floors of :func:`vjp_floors`, autograd only where its reference does not overflow."""
    cases = [(f"{act.name} ({label})", s, mask, False, act.source) for label, s, mask in
             _score_rows(act, rng, check_range)]
    cases += [(f"{act.name} @ s = {c:g}", c + np.array([[0.0, 0.8, -1.1, 1.9, -0.4]]), None, True,
               "declared singular") for c in act.singular_scores]
    rows = []
    for name, s, mask, singular, note in cases:
        try:
            rows.append(_vjp_row(act, s, mask, rng, name, note, singular))
        except ValueError as exc:  # NonFiniteError, or a convention broken at these scores
            rows.append(_failed_row(name, str(exc), singular=singular, kind=exc))
    return rows


def _vjp_row(act, s, mask, rng, name, note, singular):
    """One row of :func:`_vjp_rows`: the rows of scores ``s`` whose autograd reference can be trusted
    (:func:`untrusted_rows`) against autograd, every row against central differences."""
    u = rng.standard_normal(s.shape)
    floor_ag, floor_fd = vjp_floors(act, s, mask, u)
    bad = untrusted_rows(act, s, mask, u)
    keep = ~bad
    options = dict(name=act.name, eps=EPS, rtol=TOLERANCE)
    results = [activation_gradcheck(act, s, mask, cotangent=u, checks=("central",), atol=floor_fd, **options)]
    if keep.any():
        results.append(activation_gradcheck(act, s[keep], None if mask is None else mask[keep], cotangent=u[keep],
                                            checks=("autograd",), atol=floor_ag, **options))
    reason = None
    if bad.any():
        which = ", ".join(str(int(i)) for i in np.flatnonzero(bad))
        reason = (f"autograd's reference overflows on row(s) {which} (scores in [{s[bad].min():.4g}, "
                  f"{s[bad].max():.4g}]): it cannot be trusted there, so those rows are judged by central "
                  f"differences alone")
    return _row("activation", name, results, note=note, singular=singular, reason=reason)


def vjp_floors(act, s, mask, u):
    """``(autograd, central)``: the absolute floors under which a difference between the analytic VJP and
    each reference is rounding, not an error (``docs/verify.md``, section 2).

    Autograd's VJP and the analytic one each round Eq. 01.R4's terms, so each is off by at most
    :func:`rounding_bound`'s per-entry bound at float64's unit roundoff ``u_r = 2^-53``: the floor is
    twice its largest entry. Central differences also cannot see a change of an output that rounds
    away (the largest weight of a row where one score dominates): derivation 22's bound (22.C7),
    ``c u_r sum_j |u_j| |phi_j| / h``, taken over every output of the differenced score's row (each
    depends on it) rather than those that moved, is added to it. Where every gradient is rounding noise
    (one score far above the rest: all ``|ds| < 1e-16``) the floors keep a relative error from deciding."""
    from .core.gradcheck import ROUNDING_SAFETY, UNIT_ROUNDOFF  # noqa: PLC0415

    _, ds_bound = rounding_bound(act, s, mask, u, UNIT_ROUNDOFF)
    with np.errstate(all="ignore"):
        phi = act(s, -1, mask)
        row = np.max(np.sum(np.abs(u * phi), axis=-1)) * ROUNDING_SAFETY * UNIT_ROUNDOFF / EPS
    floor = 2.0 * float(np.max(ds_bound, initial=0.0))
    return floor, floor + float(row)


def untrusted_rows(act, s, mask, u):
    """Per row of ``s``, whether autograd's own VJP of the forward overflows (or is not finite) there:
    autograd differentiating ``g / h`` through ``h^2`` overflows where ``h`` is beyond 1e154, say, although
    the activation and its analytic VJP are finite. Such a row is no verdict on the VJP under test."""
    from autograd import make_vjp  # noqa: PLC0415

    out = np.zeros(s.shape[:-1], bool)
    for i in np.ndindex(out.shape):
        m = None if mask is None else mask[i]
        with np.errstate(all="ignore"):
            vjp, _ = make_vjp(lambda x: act(x, -1, m))(s[i])
        try:
            with np.errstate(over="raise"):
                out[i] = not np.isfinite(vjp(u[i])).all()
        except FloatingPointError:
            out[i] = True
    return out


def _score_rows(act, rng, check_range):
    """``(label, s, mask)``: three rows of seven random scores (N(0, 2^2)), the same with a random mask,
    and three rows drawn uniformly from ``check_range``, each kept 1e-2 away from declared singular scores."""
    lo, hi = check_range
    random = away_from_singular(act, 2.0 * rng.standard_normal((3, 7)))
    masked = away_from_singular(act, 2.0 * rng.standard_normal((3, 7)))
    spread = away_from_singular(act, rng.uniform(lo, hi, (3, 7)))
    return [("random", random, None), ("masked", masked, rng.random((3, 7)) < 0.8),
            (f"range [{lo:g}, {hi:g}]", spread, None)]


def _failed_row(name, note, singular=False, kind=None):
    from .custom import NonFiniteError  # noqa: PLC0415

    nan = float("nan")
    what = "not finite" if kind is None or isinstance(kind, NonFiniteError) else "error"
    return {"kind": "activation", "name": name, "autograd_max_rel": nan, "central_max_rel": nan,
            "autograd_max_abs": nan, "central_max_abs": nan, "central_worst_arg": "s",
            "central_worst_index": [], "ok": False, "singular": singular,
            "status": f"FAIL: {what}" if not singular else f"singular: {what}", "note": note}


def rounding_bound(act, s, mask, u, roundoff=None):
    """Per entry, bounds on the rounding error of the weights and of the VJP in a precision of unit
    roundoff ``roundoff`` (default float32's: ``|phi32 - phi64|`` and ``|ds32 - ds64|``, :func:`float32_rows`)."""
    roundoff = FLOAT32_ROUNDOFF if roundoff is None else roundoff
    from .custom import UserActivation  # noqa: PLC0415

    n = s.shape[-1]
    kept = np.ones(s.shape, bool) if mask is None else mask
    with np.errstate(all="ignore"):
        p, rho, dell, drho = act.p(s, -1, mask), act.rho(s), act.dell(s), act.drho(s)
        ell = np.where(kept, act.ell(s), -np.inf)
        top = np.max(np.where(np.isfinite(ell), np.abs(ell), 0.0), axis=-1, keepdims=True)
        if isinstance(act, UserActivation):  # rho' = (g' - rho h') / h: its two terms, before they cancel
            g_, h_ = act.paper_values(s)
            dg_, dh_ = act.paper_derivatives(s)
            drho = np.where(h_ > 0, (np.abs(dg_) + np.abs(rho * dh_)) / np.where(h_ > 0, h_, 1.0), 0.0)
        phi = rho * p
        gamma = (n + FLOAT32_OPERATIONS + 2.0 * (np.where(np.isfinite(ell), np.abs(ell), 0.0) + top)) \
            * roundoff
        w_bound = gamma * np.abs(phi) + n * roundoff * np.max(np.abs(phi), axis=-1, keepdims=True)
        c = np.sum(np.abs(u * phi), axis=-1, keepdims=True)
        scale = np.abs(u) * (np.abs(drho) + np.abs(rho * dell)) * p + np.abs(dell) * p * c
        ds_bound = gamma * scale + n * roundoff * np.max(scale, axis=-1, keepdims=True)
    return w_bound, ds_bound


def float32_rows(act, rng, check_range):
    """The activation in float32 against itself in float64, at the same (float32) scores and cotangent.

    For each row of :func:`_score_rows`, the float32 weights and VJP must lie within a bound made of
    float32's unit roundoff ``u = 2^-24`` (``docs/verify.md``, section 2): per entry ``gamma |phi_j| +
    n u max|phi|`` for the weights and ``gamma S_j + n u max S`` for the VJP, with ``S_j = |u_j|
    (|rho'_j| + |rho_j ell'_j|) p_j + |ell'_j| p_j sum_i |u_i phi_i|`` the size of Eq. 01.R4's terms
    before they cancel (a user's ``|rho'|`` counted as ``(|g'| + |rho h'|) / h``) and ``gamma = (n +``
    :data:`FLOAT32_OPERATIONS` ``+ 2 (|ell_j| + max|ell|)) u``: a rounding per term of the row's sums,
    the operations of each entry, and the absolute error of ``ell``, which the exponential makes relative.
    """
    from .custom import NonFiniteError  # noqa: PLC0415

    rows = []
    for label, s64, mask in _score_rows(act, rng, check_range):
        s32 = s64.astype(np.float32)
        s = s32.astype(np.float64)
        u32 = rng.standard_normal(s.shape).astype(np.float32)
        u = u32.astype(np.float64)
        name = f"{act.name} ({label}, float32)"
        try:
            w64, c64 = act.forward(s, -1, mask)
            ds64 = act.backward(u, c64)
            w32, c32 = act.forward(s32, -1, mask)
            ds32 = act.backward(u32, c32)
        except ValueError as exc:
            rows.append({"name": name, "ok": False, "note": str(exc),
                         "status": "FAIL: not finite" if isinstance(exc, NonFiniteError) else "FAIL: error"})
            continue
        w_bound, ds_bound = rounding_bound(act, s, mask, u)
        row = {"name": name, "dtype": str(w32.dtype)}
        for key, a, b, bound in (("weights", w32, w64, w_bound), ("vjp", ds32, ds64, ds_bound)):
            err = np.abs(a.astype(np.float64) - b)
            ratio = np.where(err == 0, 0.0, err / np.where(bound > 0, bound, 1e-300))
            i = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
            row[key] = {"max_abs_error": float(err.max()), "max_rel_error": float(err.max() / max(np.abs(b).max(),
                                                                                                 1e-300)),
                        "worst_over_bound": float(ratio[i]), "worst_at_s": float(s[i])}
        reasons = [f"the {what} come back {a.dtype} for float32 scores: a function of the activation returns "
                   f"{a.dtype} (keep the scores' precision)" for what, a in (("weights", w32), ("VJP", ds32))
                   if a.dtype != np.float32]
        reasons += [f"the float32 {what} are off by {row[key]['max_abs_error']:.3g} at s = {row[key]['worst_at_s']:.6g}, "
                    f"{row[key]['worst_over_bound']:.3g} times float32's rounding bound there"
                    for key, what in (("weights", "weights"), ("vjp", "VJP")) if row[key]["worst_over_bound"] > 1.0]
        row["ok"] = not reasons
        row["status"] = "ok" if row["ok"] else "FAIL"
        row["reason"] = "; ".join(reasons) or None
        rows.append(row)
    return rows


def check_activation(act, *, seed: int = 0, check_range=None, dtype: str = "float64") -> dict:
    """Check one activation of yours: every check ``refattn check`` runs on a built-in, and more.

    Parameters
    ----------
    act : Activation
        From :func:`refattn.define_activation`, an Activation subclass, or
        :func:`refattn.custom.load_activation` (a definition that failed its
        checks, ``act.refused``, is reported as failed with what is wrong).
    seed : int
        Seed of the random points and cotangents.
    check_range : (float, float), optional
        Where derivatives are compared and the spread rows are drawn
        (default: the activation's own ``check_range``, else [-10, 10]).
    dtype : {"float64", "float32"}
        ``"float32"`` adds :func:`float32_rows`.

    Returns
    -------
    dict (JSON-able)
        ``activation``, ``source``, ``file``, ``sha256``, ``given`` (derivatives
        by hand), ``range``, ``derivatives`` (:func:`refattn.custom.compare_derivative`
        reports: points, range, worst error, each declared singular score with
        its one-sided slopes), ``rows`` (the VJP, as :func:`run_check`'s),
        ``float32`` (rows, with ``dtype="float32"``), ``refused`` (a definition's
        failed check, or None), ``errors`` and ``ok``.
    """
    from .custom import DEFAULT_RANGE, _range, derivative_points  # noqa: PLC0415

    if not isinstance(act, Activation):
        raise TypeError(f"activation: expected an Activation, got {type(act).__name__}")
    if dtype not in ("float64", "float32"):
        raise ValueError(f"dtype: expected 'float64' or 'float32', got {dtype!r}")
    check_range = _range(check_range if check_range is not None else getattr(act, "check_range", DEFAULT_RANGE),
                         "range")
    rng = np.random.default_rng(seed)
    x = derivative_points(act.singular_scores, seed, check_range)
    derivatives, error = _hand_derivatives(act, x)
    refused = getattr(act, "refused", None)
    result = {"activation": act.name, "source": act.source, "file": getattr(act, "file", None),
              "sha256": getattr(act, "sha256", None), "given": list(getattr(act, "given", ("drho", "dell"))),
              "range": list(check_range), "seed": seed, "dtype": dtype, "eps": EPS, "tolerance": TOLERANCE,
              "derivatives": derivatives, "refused": refused, "errors": [] if error is None else [error]}
    if refused is not None:
        act = _usable_twin(act)
    result["rows"] = _vjp_rows(act, rng, check_range) if act is not None else []
    if dtype == "float32" and act is not None:
        result["float32"] = float32_rows(act, rng, check_range)
    result["ok"] = bool(refused is None and error is None and all(d["ok"] for d in derivatives)
                        and all(r["ok"] for r in result["rows"]) and all(r["ok"] for r in result.get("float32", ())))
    return result


def _usable_twin(act):
    """A definition refused for a wrong derivative as an activation the VJP check can run on (the
    wrong derivative then shows there too), or None where ``g`` or ``h`` itself failed its checks."""
    if getattr(act, "refused_at", None) != "derivative":
        return None
    twin = copy.copy(act)
    twin.refused = None
    return twin


def check_options(args):
    """``(check_range, plot)`` of ``refattn check``'s arguments, checked before any work: ``--range LO,HI``
    two finite numbers with LO < HI, ``--seed`` >= 0; ``--range``, ``--dtype float32`` and ``--plot``
    need ``--activation``. One line naming the option otherwise."""
    from .custom import _range  # noqa: PLC0415

    if args.seed < 0:
        raise ValueError(f"--seed: expected an integer >= 0, got {args.seed}")
    if args.activation is None:
        for option, value in (("--range", args.range), ("--plot", args.plot),
                              ("--dtype", None if args.dtype == "float64" else args.dtype)):
            if value is not None:
                raise ValueError(f"{option}: applies to --activation FILE.py[:NAME] only")
    check_range = None
    if args.range is not None:
        parts = args.range.split(",")
        if len(parts) != 2:
            raise ValueError(f"--range: expected LO,HI, got {args.range!r}")
        try:
            check_range = _range([float(v) for v in parts], "--range")
        except ValueError:
            raise ValueError(f"--range: expected two finite numbers LO,HI with LO < HI, got {args.range!r}") from None
    if args.plot is not None and not args.plot.strip():
        raise ValueError(f"--plot: expected a folder name, got {args.plot!r}")
    return check_range, args.plot


def run_check_file(spec, *, seed: int = 0, check_range=None, dtype: str = "float64") -> dict:
    """``refattn check --activation FILE.py:NAME`` (:func:`check_activation` of one activation) or
    ``--activation FILE.py`` (each activation the file defines, one by one: one that fails or cannot
    be made is reported and the others are still checked; ``{"file", "activations": [...], "ok"}``).
    A file or name that cannot be used is a ``ValueError`` naming ``--activation``."""
    from .custom import load_activation, load_file, parse_spec  # noqa: PLC0415

    path, name = parse_spec(spec, "--activation", file_alone=True)
    if name is not None:
        return check_activation(load_activation(spec, allow_refused=True), seed=seed, check_range=check_range,
                                dtype=dtype)
    results = []
    for key, act in load_file(path).items():
        if isinstance(act, str):
            results.append({"activation": key, "ok": False, "errors": [act], "derivatives": [], "rows": [],
                            "refused": None, "file": path})
        else:
            results.append(check_activation(act, seed=seed, check_range=check_range, dtype=dtype))
    return {"file": path, "activations": results, "ok": all(r["ok"] for r in results)}


def _derivative_line(d):
    """One line per derivative report: given or autograd's, worst error, points and range."""
    lo, hi = d["range"]
    where = f"{d['points']} points in [{lo:g}, {hi:g}]"
    if not d["given"]:
        return f"  {d['derivative']:<16s} from autograd (nothing to compare); {d['of']} evaluated at {where}"
    worst = d["worst"]
    verdict = "ok" if d["ok"] else "FAIL"
    line = (f"  {d['derivative']:<16s} by hand: max relative error {d['max_rel_error']:.2e} vs autograd "
            f"(worst at s = {worst['s']:.6g}) over {where}  {verdict}")
    skipped = d.get("not_compared") or []
    if skipped:
        line += (f"\n      not compared at {len(skipped)} point(s), s in [{min(skipped):g}, {max(skipped):g}]: "
                 f"autograd's derivative of {d['of']} is not finite there (it overflows), so it is no reference")
    for k in d["kinks"][:1] if d["worst"]["rel_error"] <= d["tolerance"] else ():
        line += (f"\n      differs at s = {k['s']:g}, a kink of {d['of']} nobody declared "
                 f"(slopes {k['left_slope']:.6g} "
                 f"left, {k['right_slope']:.6g} right): declare it with singular_scores")
    return line


def _vjp_lines(r):
    """The VJP rows of :func:`format_activation`: a table, then each row's reason where it has one."""
    rows = r.get("rows", [])
    if not rows:
        return []
    w = max(len(x["name"]) for x in rows)
    lines = ["", f"VJP against autograd and central differences (float64, eps={r['eps']:g}; pass: relative "
                 f"error <= {r['tolerance']:g} above the rounding floors, refattn.check.vjp_floors):",
             f"  {'scores':{w}s}  {'vs autograd':>11s}  {'vs central':>11s}  status"]
    for x in rows:
        lines.append(f"  {x['name']:{w}s}  {x['autograd_max_rel']:11.2e}  {x['central_max_rel']:11.2e}  "
                     f"{x['status']}")
    for x in rows:
        why = x["note"] if x["status"].endswith(("not finite", "error")) else x.get("reason")
        if why:
            lines.append(f"    {x['name']}: {why}")
    return lines


def format_activation(result: dict) -> str:
    """:func:`check_activation`'s result (or :func:`run_check_file`'s for a whole file) as text: what
    was checked (each hand-given derivative, its agreement with autograd, the range and points, each
    declared singular score with its one-sided slopes), the VJP rows, float32, and the verdict."""
    if "activations" in result:
        parts = [format_activation(r) for r in result["activations"]]
        bad = [r["activation"] for r in result["activations"] if not r["ok"]]
        parts.append(f"{result['file']}: {len(result['activations']) - len(bad)} of {len(result['activations'])} "
                     f"activations passed" + (f"; FAILED: {', '.join(bad)}" if bad else ""))
        return "\n\n".join(parts)
    r = result
    where = f" from {r['file']} (sha256 {r['sha256'][:12]})" if r.get("file") and r.get("sha256") else ""
    lines = [f"refattn check: activation {r['activation']!r}{where}"]
    if r.get("source"):
        lines.append(f"source: {r['source']}")
    for e in r.get("errors", []):
        lines.append(f"ERROR: {e}")
    if r.get("refused"):
        lines.append(f"REFUSED when defined: {r['refused']}")
    ds = r.get("derivatives", [])
    if ds:
        lines += ["", f"Derivatives against autograd's, point by point (pass: relative error <= "
                      f"{ds[0]['tolerance']:g}):"] + [_derivative_line(d) for d in ds]
        sing = [(d, e) for d in ds for e in d["singular"]]
        if sing:
            lines.append("Declared singular scores (a hand derivative must give autograd's value there; only "
                         "central differences are excused):")
            for d, e in sing:
                lines.append(f"  s = {e['s']:g}: {d['derivative']} gives {e['given']:.6g}, "
                             f"autograd {e['autograd']:.6g}; "
                             f"slopes of {d['of']} {e['left_slope']:.6g} (left), {e['right_slope']:.6g} (right)  "
                             f"{'ok' if e['ok'] else 'FAIL'}")
    lines += _vjp_lines(r)
    if "float32" in r:
        lines += ["", "float32 against float64 at the same scores (pass: within float32's rounding bound, "
                      "refattn.check.float32_rows):"]
        for x in r["float32"]:
            if "weights" in x:
                worst = max(x["weights"]["worst_over_bound"], x["vjp"]["worst_over_bound"])
                lines.append(f"  {x['name']}: weights {x['weights']['max_rel_error']:.1e}, VJP "
                             f"{x['vjp']['max_rel_error']:.1e} relative ({worst:.2f} of the bound)  {x['status']}")
                if x.get("reason"):
                    lines.append(f"    {x['reason']}")
            else:
                lines.append(f"  {x['name']}: {x['status']}: {x['note']}")
    if r.get("plot"):
        lines += ["", f"picture: {r['plot']}"]
    lines += ["", "all checks passed" if r["ok"] else "check FAILED"]
    return "\n".join(lines)


#: The score rows :func:`plot_activation` draws: a label and how to make the row from ``(lo, hi)``.
PLOT_ROWS = ("random scores", "spread over the range", "one score far above the rest", "masked (x: masked keys)",
             "all scores 0")


def _plot_rows(check_range, rng, n=9):
    lo, hi = check_range
    random = 1.5 * rng.standard_normal(n)
    spread = np.linspace(lo, hi, n)
    far = np.concatenate([[hi], rng.standard_normal(n - 1)])
    masked = 1.5 * rng.standard_normal(n)
    mask = np.ones(n, bool)
    mask[[1, 4, 6]] = False
    return [(random, None), (spread, None), (far, None), (masked, mask), (np.zeros(n), None)]


def plot_activation(act, *, check_range=None, seed=0):
    """The weights and the gradient of ``act`` beside softmax's, on a few rows of scores.

    One row of panels per :data:`PLOT_ROWS` (random scores, scores spread over
    ``check_range``, one score far above the rest, a masked row, all scores 0):
    left the scores, middle the weights ``phi`` (``act`` bars, softmax dots),
    right the gradient ``ds = u^T dphi/ds`` for one random cotangent ``u``.
    Where ``act`` has no finite value (its ``g`` or ``h`` overflowing) the
    panel says so instead of drawing it. Returns a matplotlib ``Figure``.
    """
    from matplotlib.figure import Figure  # noqa: PLC0415

    from .custom import DEFAULT_RANGE, _range, divergence_as_data  # noqa: PLC0415

    check_range = _range(check_range if check_range is not None else getattr(act, "check_range", DEFAULT_RANGE),
                         "range")
    rng = np.random.default_rng(seed)
    mine, soft = divergence_as_data(act), activation("softmax")  # NaN where act cannot be evaluated: drawn as a note
    rows = _plot_rows(check_range, rng)
    fig = Figure(figsize=(11, 2.1 * len(rows) + 0.6))
    axes = fig.subplots(len(rows), 3, squeeze=False)
    for (s, mask), label, (ax_s, ax_w, ax_g) in zip(rows, PLOT_ROWS, axes):
        k = np.arange(s.size)
        u = rng.standard_normal(s.size)
        keep = np.ones(s.size, bool) if mask is None else mask
        ax_s.bar(k, s, color=np.where(keep, "0.5", "0.85"))
        ax_s.set_ylabel(label, fontsize=7)
        for j in np.flatnonzero(~keep):
            ax_s.text(j, 0, "x", ha="center", va="center", fontsize=9, color="r")
        for ax, what in ((ax_w, "weights"), (ax_g, "gradient")):
            for a, style in ((mine, "bar"), (soft, "dots")):
                with np.errstate(all="ignore"):
                    w, cache = a.forward(s, -1, mask)
                    y = w if what == "weights" else a.backward(u, cache)
                if style == "bar":
                    if np.isfinite(y).all():
                        ax.bar(k, y, color="tab:red", alpha=0.7, label=act.name)
                    else:
                        ax.text(0.5, 0.5, f"{act.name}: not finite here\n(g or h overflows)", transform=ax.transAxes,
                                ha="center", va="center", fontsize=8, color="tab:red")
                else:
                    ax.plot(k, y, "o", color="tab:blue", ms=4, label="softmax")
            ax.axhline(0.0, color="k", lw=0.5)
    axes[0, 0].set_title("scores s", fontsize=9)
    axes[0, 1].set_title("weights phi(s)", fontsize=9)
    axes[0, 2].set_title("gradient u^T dphi/ds (one random u)", fontsize=9)
    axes[0, 1].legend(fontsize=7)
    fig.suptitle(f"{act.name} beside softmax" + (f" ({act.file})" if getattr(act, "file", None) else ""), fontsize=10)
    fig.tight_layout()
    return fig
