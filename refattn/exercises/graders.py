"""One grader per exercise, in the order of ``exercises/README.md`` (exercise 15's in
:mod:`refattn.exercises.gradient_check_cases`), and the registry with labels.

A grader is ``cases(hidden_seed, public_seed=None) -> list of Case``
(:mod:`refattn.exercises.judge`): public cases from a fixed seed, the inputs a
student can reproduce (or, on an autograder, from a seed per submission: the
same kinds of cases on other inputs); hidden cases from ``hidden_seed``
(other seeds, shapes, and the edges each exercise is about), reported by kind
only. Inputs are drawn here; the student's functions run in another process
on them; each case's expectations (:class:`~refattn.exercises.judge.Expect`)
are computed only after that process has ended, from the library
(:mod:`refattn.exercises.reference` for backward passes, forward values and
the propositions' closed forms), autograd, or a formula of the derivations,
and judged by :func:`refattn.exercises.judge.judge_case`. Cotangents are
random, never all ones, except where the exercise is about the all-ones
cotangent.

Every comparison's tolerance is :func:`refattn.exercises.judge.tolerance` of
the size of the terms a correct answer adds to form each entry (for a VJP,
the products of the cotangent, the weights and their derivatives in absolute
value), of the length of its sums and of the arguments of its exponentials:
the rounding error a correct answer can have on that case, in any evaluation
order, and nothing fitted to one machine. A case the statement says an
answer must pass is a separate, *required* case that checks that property
alone (finite where an exponential overflows; a long row within the time
limit), so that a wrong sign or factor fails the other cases with its hint.
The long rows (:class:`~refattn.exercises.judge.Drawn`: 300,000 scores,
drawn by the answer's own process) are where differentiating the forward
pass numerically, ``n`` forward passes for ``n`` scores, cannot finish within
the time limit while the derived formula takes one pass.
"""

from __future__ import annotations

import math

import autograd.numpy as anp
import numpy as np
from autograd import make_vjp

from ..core.activations import activation
from ..core.gradcheck import UNIT_ROUNDOFF
from ..core.scores import score
from .gradient_check_cases import gradient_check_cases
from .judge import Case, Drawn, Exercise, Expect, Table, call, tolerance, value
from .reference import activation_vjp, score_vjp

__all__ = ["EXERCISES", "DEFAULT_HIDDEN_SEED", "closure_shift", "crossover_angle", "best_step", "error_bound",
           "LONG_ROW"]

#: The hidden cases' seed when none is given (an exported autograder draws one per submission).
DEFAULT_HIDDEN_SEED = 20_240_611

#: The length of the long rows. Differentiating the forward pass numerically takes ``n`` forward passes of
#: ``n`` scores (central differences: ``2 n^2``, 1.8e11 exponentials), about 90 s of CPU time at 0.5 ns
#: each, the fastest NumPy does; an answer's process has its time limit plus 10 s (20 s by default).
#: The derived VJP takes one pass: milliseconds.
LONG_ROW = 300_000


def _rng(number, public_seed=None):
    """The public cases' generator: a fixed seed (the cases a student can run, in the handout), or, on an
    autograder, one drawn per submission (``public_seed``): cases of the same kinds on inputs no table
    of the handout's can answer."""
    return np.random.default_rng(1000 + number if public_seed is None else [1000 + number, int(public_seed)])


def _hidden_rng(number, seed):
    return np.random.default_rng([number, int(seed)])


def _drawn(rng, shape, scale=1.0, zero_every=0) -> Drawn:
    """An input the answer's process draws itself (:class:`~refattn.exercises.judge.Drawn`), its seed from ``rng``."""
    return Drawn((int(rng.integers(2 ** 62)),), tuple(shape), float(scale), int(zero_every))


def _row_max(x):
    """The largest finite ``|x|`` of each row (the last axis kept): the argument of a row's exponentials."""
    a = np.abs(np.asarray(x, dtype=np.float64))
    a = np.where(np.isfinite(a), a, 0.0)
    return np.max(a, axis=-1, keepdims=True) if a.ndim else a


def _close(label, where, want, size, *, terms, argument=0.0, **options) -> Expect:
    """``want`` at ``where``, within the rounding bound of each entry (:func:`~refattn.exercises.judge.tolerance`)."""
    return Expect("close", label, where, want, atol=tolerance(size, terms=terms, argument=argument), **options)


def _required_finite(kind, calls, label, prop, *, where=(0,), shape=None, hidden=False, hint=None) -> Case:
    """A required case that checks one property the statement asks for, and only that: the value at
    ``where`` is finite (``prop`` says where a naive formula is not). A wrong sign or factor passes it."""
    return Case(kind, tuple(calls), lambda: [Expect(
        "finite", label, where, shape=shape, hint=hint, message=f"{label}: NaN or inf, where it must stay finite: {prop}",
        passed=f"{label}: every entry finite: {prop}")], hidden, required=True)


#: What a long row's required case says it checks: a property of the derivation, not of the digits.
LONG_PROPERTY = ("the derived formula takes about one pass over the scores; {n} forward passes (differentiating the "
                 "forward pass numerically) cannot finish within the time limit")


def _long_case(kind, calls, outputs, forms, hidden) -> Case:
    """A required case on long inputs the answer's process draws: each output must come back within
    the time limit as a nonzero multiple of the right value (a wrong sign or factor is left to the
    other cases and their hints). ``outputs`` is a function returning ``[(where, label, want,
    tolerance)]``, computed once the answer's process has ended; ``forms``, ``[(where, label,
    shape)]``, what the handout's checker checks of them."""
    prop = LONG_PROPERTY.format(n="n")

    def expect():
        return [Expect("proportional", label, where, want, atol=atol,
                       message=f"{label}: not the right value (up to a constant factor) on the long input, where "
                               f"{prop}", passed=f"{label}: the right value, up to a constant factor judged by the "
                                                 f"other cases, on the long input: {prop}")
                for where, label, want, atol in outputs()]

    form = [Expect("finite", label, where, shape=shape,
                   passed=f"{label}: returned within the time limit, finite, of the right shape (its values are "
                          f"checked by your course's grader, which draws the same kind of input)")
            for where, label, shape in forms]
    return Case(kind, tuple(calls), expect, hidden, required=True, form=form)


def _autograd_vjp(fun, s, u):
    """``u^T d fun / d s`` by autograd: an implementation independent of the library's backward passes."""
    vjp_fn, _ = make_vjp(fun)(s)
    return vjp_fn(u)


# ------------------------------------------------------------------------------
# 01 softmax's VJP
# ------------------------------------------------------------------------------


def _softmax_size(s, u):
    """The size of the terms of ``ds = phi (u - <u, phi>)``: ``phi (|u| + <|u|, phi>)``."""
    phi = activation("softmax")(s)
    return phi * (np.abs(u) + np.sum(np.abs(u) * phi, axis=-1, keepdims=True))


def _softmax_vjp_case(kind, s, u, hidden, against_autograd=False):
    label = ("softmax_vjp(s, u) against autograd's VJP of softmax's forward pass" if against_autograd
             else "softmax_vjp(s, u)")

    def expect():
        act = activation("softmax")
        want = _autograd_vjp(lambda x: act(x), s, u) if against_autograd else activation_vjp("softmax", s, u)
        return [_close(label, (0,), want, _softmax_size(s, u), terms=s.shape[-1], argument=_row_max(s),
                       inputs=None if hidden else {"s": s, "u": u})]

    return Case(kind, (call("softmax_vjp", s, u),), expect, hidden, s.ndim)


def _softmax_long_case(rng, hidden):
    s, u = _drawn(rng, (LONG_ROW,), 2.0), _drawn(rng, (LONG_ROW,))

    def outputs():
        sa, ua = s.array(), u.array()
        return [((0,), "softmax_vjp(s, u)", activation_vjp("softmax", sa, ua),
                 tolerance(_softmax_size(sa, ua), terms=LONG_ROW, argument=_row_max(sa)))]

    return _long_case(f"a row of {LONG_ROW:,} scores within the time limit (required)", (call("softmax_vjp", s, u),),
                      outputs, [((0,), "softmax_vjp(s, u)", (LONG_ROW,))], hidden)


def softmax_vjp_cases(hidden_seed, public_seed=None):
    rng = _rng(1, public_seed)
    cases = []
    for kind, shape, shift in (("a 1-D row", (6,), 0.0), ("2-D scores", (3, 5), 0.0),
                               ("3-D scores", (2, 3, 4), 0.0), ("scores near 800 (e^s overflows)", (2, 5), 800.0)):
        s = shift + 2.0 * rng.standard_normal(shape)
        u = rng.standard_normal(shape)
        cases.append(_softmax_vjp_case(kind, s, u, False))
    cases.append(_required_finite("finite for scores near 800 (required)", cases[-1].calls, "softmax_vjp(s, u)",
                                  "e^s overflows there, softmax does not"))
    s, u = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    cases.append(_softmax_vjp_case("against autograd, a random cotangent", s, u, False, against_autograd=True))
    cases.append(_softmax_long_case(rng, False))
    h = _hidden_rng(1, hidden_seed)
    for kind, shape, shift, scale in (("another 1-D row", (int(h.integers(2, 9)),), 0.0, 2.0),
                                      ("4-D scores", (2, 2, 3, 5), 0.0, 2.0),
                                      ("widely spread scores near -900", (3, 7), -900.0, 30.0),
                                      ("rows of one entry", (4, 1), 0.0, 2.0)):
        s = shift + scale * h.standard_normal(shape)
        cases.append(_softmax_vjp_case(kind, s, h.standard_normal(shape), True))
        if shift:
            cases.append(_required_finite("finite for scores near -900 (required)", cases[-1].calls,
                                          "softmax_vjp(s, u)", "e^s underflows to 0 there, 0/0 as written",
                                          hidden=True))
    s, u = h.standard_normal((2, 4)), h.standard_normal((2, 4))
    cases.append(_softmax_vjp_case("against autograd at other scores", s, u, True, against_autograd=True))
    cases.append(_softmax_long_case(h, True))
    return cases


# ------------------------------------------------------------------------------
# 02 tanhmax: ell, rho', ell'
# ------------------------------------------------------------------------------

#: The size of the terms each of exercise 02's functions adds, by its name: ell = |s| + log1p(e^{-2|s|})
#: - log 2 (a sum of terms of size |s| and 1), rho' = 1 - tanh^2 and ell' = tanh (terms of size 1).
_TANHMAX_SIZES = {"ell": lambda s: np.abs(s) + 1.0, "drho": lambda s: np.ones_like(s), "dell": lambda s: np.ones_like(s)}


def _tanhmax_cases(kind, s, hidden):
    act = activation("tanhmax")

    def expect(fname):
        with np.errstate(all="ignore"):
            want = getattr(act, fname)(s)
        return [_close(f"{fname}(s)", (0,), want, _TANHMAX_SIZES[fname](s), terms=3,
                       inputs=None if hidden else {"s": s})]

    return [Case(f"{fname} on {kind}", (call(fname, s),), lambda fname=fname: expect(fname), hidden, s.ndim)
            for fname in ("ell", "drho", "dell")]


def _ell_finite(kind, s, hidden):
    return _required_finite(f"ell finite on {kind} (required)", (call("ell", s),), "ell(s)",
                            "cosh s overflows beyond 710.5, log cosh s does not", hidden=hidden,
                            hint="NaN or inf in ell: log(cosh(s)) overflows beyond 710.5; factor e^{|s|} out of cosh")


def tanhmax_derivatives_cases(hidden_seed, public_seed=None):
    edge = np.array([0.0, 1e-300, -1e-8, 700.0, -710.5, 1e3, -1e5, 1e300, -1e300])
    s = np.concatenate([np.linspace(-30.0, 30.0, 241), edge])
    if public_seed is not None:  # the same kinds of scores, on other values: the edges moved too
        rng = _rng(2, public_seed)
        s[:241] += rng.uniform(-0.1, 0.1, 241)
        s[241:] *= 1.0 + rng.uniform(-1e-3, 1e-3, edge.size)
    cases = _tanhmax_cases("250 scores in [-1e300, 1e300]", s, False)
    cases.append(_ell_finite("250 scores in [-1e300, 1e300]", s, False))
    h = _hidden_rng(2, hidden_seed)
    scales = np.array([1.0, 20.0, 700.0, 1e5])[:, None]
    cases += _tanhmax_cases("a 2-D array of scores at several scales", scales * h.standard_normal((4, 30)), True)
    edge = np.array([354.9, 355.1, -355.1, 709.7, 709.9, 710.4, 710.6, -710.6, 711.0, 5e-324, -5e-324,
                     1e-160, 3e-8, 19.0, 37.5, -37.5, 8e307, -8e307])
    edge = edge * (1.0 + 1e-9 * h.standard_normal(edge.size))
    cases += _tanhmax_cases("scores near the overflow thresholds of e^{2s} and cosh", edge, True)
    cases.append(_ell_finite("scores near the overflow thresholds of e^{2s} and cosh", edge, True))
    return cases


# ------------------------------------------------------------------------------
# 03 the reweighted VJP, Eq. 01.R4/R5
# ------------------------------------------------------------------------------


def _softplus(s):
    return anp.logaddexp(0.0, s)


def _softplus_max():
    from ..custom import define_activation  # noqa: PLC0415

    return define_activation("softplus-max", _softplus, _softplus, source="exercise 03: g = h = softplus")


def _activation03(name):
    """An activation of exercise 03 by name: a built-in, or softplus-max (g = h = softplus, user-defined)."""
    return _softplus_max() if name == "softplus-max" else activation(name)


def _rows_of(names, s, mask):
    """``(arrays, rows)``: p, rho, rho', ell' (and ell) of ``s``, row ``i`` (along the last axis) of the activation
    ``names[i % len(names)]``, with ``mask``; and ``(activation, s, mask)`` per row, for the references."""
    n = s.shape[-1]
    flat = s.reshape(-1, n)
    masks = [None] * len(flat) if mask is None else list(np.broadcast_to(mask, s.shape).reshape(-1, n))
    arrays = {k: np.zeros_like(flat) for k in ("p", "rho", "drho", "dell", "ell")}
    rows = []
    for i, (si, mi) in enumerate(zip(flat, masks)):
        act = _activation03(names[i % len(names)])
        with np.errstate(all="ignore"):
            for k in arrays:
                arrays[k][i] = act.p(si, mask=mi) if k == "p" else getattr(act, k)(si)
        rows.append((act, si, mi))
    return {k: v.reshape(s.shape) for k, v in arrays.items()}, rows


def _derivative_size(x):
    """The size of the terms a derivative ``rho'`` or ``ell'`` is formed from: at least 1 (tanh's ``1 -
    2t/(1 + t)``, sech^2's ``1 - tanh^2``, sigsoftmax's ``1 + sigmoid(-s)``: rounded absolutely near 0)."""
    with np.errstate(all="ignore"):
        return np.maximum(np.abs(x), 1.0)


def _reweighted_size(a, u):
    """The size of the terms of Eq. 01.R5, ``u (rho' + rho ell') p - p ell' <u, phi>``, entry by entry."""
    p, rho, drho, dell = a["p"], a["rho"], _derivative_size(a["drho"]), _derivative_size(a["dell"])
    with np.errstate(all="ignore"):
        size = (np.abs(u) * (drho + np.abs(rho) * dell) * p
                + p * dell * np.sum(np.abs(u * rho) * p, axis=-1, keepdims=True))
    return np.where(p > 0, size, 0.0)


def _jacobian_times(a, u):
    """``J u`` (``J[j, k] = d phi_j / d s_k``, Eq. 01.R3 contracted over the input index): the VJP's
    transpose, a common wrong answer."""
    phi = a["rho"] * a["p"]
    with np.errstate(all="ignore"):
        return (a["drho"] * a["p"] + phi * a["dell"]) * u - phi * np.sum(a["p"] * a["dell"] * u, axis=-1,
                                                                        keepdims=True)


def _reweighted_case(kind, names, s, u, mask, hidden):
    """Exercise 03 on rows of the activations ``names`` (one per row, in turn), judged against each
    activation's own backward pass."""
    a, rows = _rows_of(names, s, mask)

    def expect():
        with np.errstate(all="ignore"):
            # the mistake the statement warns about: <u, p> where Eq. 01.R4 has <u, phi> = sum_i u_i rho_i p_i
            with_p = u * (a["drho"] + a["rho"] * a["dell"]) * a["p"] - a["dell"] * a["p"] * np.sum(
                u * a["p"], axis=-1, keepdims=True)
        hints = ((with_p, "your result is Eq. 01.R4 with <u, p> in place of <u, phi> = sum_i u_i rho_i p_i: the "
                          "two agree only where rho = 1, which is why softmax-like rows pass"),
                 (_jacobian_times(a, u), "your result is J u, the Jacobian times u: the VJP is u^T J, "
                  "ds_k = sum_j u_j dphi_j/ds_k (a sum over the output index j), its transpose"))
        want = np.stack([activation_vjp(act, si, ui, mask=mi)
                         for (act, si, mi), ui in zip(rows, u.reshape(-1, u.shape[-1]))]).reshape(s.shape)
        return [_close("reweighted_vjp(p, rho, drho, dell, u)", (0,), want, _reweighted_size(a, u), terms=s.shape[-1],
                       argument=_row_max(a["ell"]),
                       inputs={"s": s, "u": u, "p": a["p"], "rho": a["rho"]}, hints=hints)]

    # the "right in 1-D, wrong in more axes" hint reads cases without a mask only: a masked case fails for
    # its mask as often as for its axis
    return Case(kind, (call("reweighted_vjp", a["p"], a["rho"], a["drho"], a["dell"], u),), expect, hidden,
                s.ndim if mask is None else None)


def _reweighted_autograd_case(kind, s, u):
    act = activation("tanhmax")
    a, _ = _rows_of(["tanhmax"], s, None)
    label = "reweighted_vjp(p, rho, drho, dell, u) against autograd's VJP of tanhmax's forward pass"
    return Case(kind, (call("reweighted_vjp", a["p"], a["rho"], a["drho"], a["dell"], u),),
                lambda: [_close(label, (0,), _autograd_vjp(lambda x: act(x), s, u), _reweighted_size(a, u),
                                terms=s.shape[-1], argument=_row_max(a["ell"]), inputs={"s": s, "u": u})], False,
                s.ndim)


def _random_mask(rng, shape):
    mask = rng.random(shape) < 0.75
    mask[..., 0] = True
    return mask


#: Exercise 03's cases with a mask: the activations of their rows, one per row in turn. Only the first
#: has rho = 1 on every row (softmax-like); every other mixes in rows whose rho is not 1 (tanhmax,
#: signexp) or whose rho' is not 0 (linear), where the mistakes the statement warns about show.
MIXED_ROWS = (("softmax", "expressive", "sigsoftmax", "softplus-max"), ("tanhmax", "softmax"),
              ("signexp", "expressive"), ("linear", "tanhmax"), ("sigsoftmax", "signexp"))


def reweighted_vjp_cases(hidden_seed, public_seed=None):
    rng = _rng(3, public_seed)
    cases = [_reweighted_case("tanhmax on a 1-D row", ["tanhmax"], 2.0 * rng.standard_normal(6),
                              rng.standard_normal(6), None, False)]
    # sigsoftmax's Jacobian is not symmetric (ell'/rho is not constant): J u in place of u^T J fails here
    cases.append(_reweighted_case("sigsoftmax on a 1-D row", ["sigsoftmax"], 2.0 * rng.standard_normal(6),
                                  rng.standard_normal(6), None, False))
    cases.append(_reweighted_autograd_case("tanhmax against autograd, a random cotangent",
                                           rng.standard_normal((2, 5)), rng.standard_normal((2, 5))))
    for names in MIXED_ROWS:
        shape = (2 * len(names) if len(names) < 4 else len(names), 6)
        s, u = 2.0 * rng.standard_normal(shape), rng.standard_normal(shape)
        what = (f"rows with rho = 1 ({', '.join(names)})" if len(names) > 2 else f"{names[0]} and {names[1]} rows")
        cases.append(_reweighted_case(f"{what}, with a random mask", names, s, u, _random_mask(rng, shape), False))
    h = _hidden_rng(3, hidden_seed)
    s, u = 3.0 * h.standard_normal((2, 3, 5)), h.standard_normal((2, 3, 5))
    cases.append(_reweighted_case("3-D, rows of signexp, sigmoid, relu and tanhmax, with a random mask",
                                  ["signexp", "sigmoid", "relu", "tanhmax"], s, u, _random_mask(h, s.shape), True))
    s, u = 2.0 * h.standard_normal((3, 4)), h.standard_normal((3, 4))
    mask = _random_mask(h, (3, 4))
    mask[1] = False
    cases.append(_reweighted_case("tanhmax and expressive rows, one fully masked", ["tanhmax", "expressive"], s, u,
                                  mask, True))
    cases.append(_reweighted_case("a signexp 1-D row", ["signexp"], 2.0 * h.standard_normal(7),
                                  h.standard_normal(7), None, True))
    s = 0.2 + np.abs(h.standard_normal((4, 5)))
    cases.append(_reweighted_case("cosformer and tanhmax rows on positive scores", ["cosformer", "tanhmax"], s,
                                  h.standard_normal((4, 5)), None, True))
    s, u = 5.0 * h.standard_normal((4, 6)), h.standard_normal((4, 6))
    cases.append(_reweighted_case("tanhmax and sigsoftmax rows of large scores, with a random mask",
                                  ["tanhmax", "sigsoftmax"], s, u, _random_mask(h, (4, 6)), True))
    return cases


# ------------------------------------------------------------------------------
# 04 the Jacobian of phi
# ------------------------------------------------------------------------------

#: What the ``act`` handed to ``jacobian`` offers (its ``jacobian`` and ``vjp`` are not among them).
OFFERED = ("g", "h", "dg", "dh", "rho", "drho", "ell", "dell", "p", "forward")


def _autograd_jacobian(fun, s):
    vjp_fn, out = make_vjp(fun)(s)
    return np.stack([vjp_fn(e) for e in np.eye(np.size(out))])  # row j = e_j^T J


def _jacobian_size(v):
    """The size of the terms of Eq. 01.R3, ``[j = k](rho'_j p_j + phi_j ell'_j) - phi_j p_k ell'_k``."""
    p, phi, drho, dell = v["p"], v["rho"] * v["p"], _derivative_size(v["drho"]), _derivative_size(v["dell"])
    with np.errstate(all="ignore"):
        pl = np.where(p > 0, p * dell, 0.0)
        diag = np.where(p > 0, drho * p + np.abs(phi) * dell, 0.0)
    return np.diag(diag) + np.outer(np.abs(phi), pl)


def _jacobian_case(kind, act, s, hidden):
    with np.errstate(all="ignore"):
        values = {k: np.asarray(act(s) if k == "forward" else getattr(act, k)(s), dtype=np.float64)
                  for k in OFFERED}
    table = Table(act.name, s, values)
    label = "jacobian(act, s)[j, k] = d phi_j / d s_k"
    return Case(kind, (call("jacobian", table, s),), lambda: [_close(
        label, (0,), _autograd_jacobian(lambda x: act(x), s), _jacobian_size(values), terms=s.size,
        argument=_row_max(values["ell"]), inputs=None if hidden else {"s": s})], hidden)


def jacobian_cases(hidden_seed, public_seed=None):
    rng = _rng(4, public_seed)
    cases = [_jacobian_case(name, activation(name), 2.0 * rng.standard_normal(6), False)
             for name in ("softmax", "tanhmax", "sigsoftmax", "expressive", "relu")]
    h = _hidden_rng(4, hidden_seed)
    for name, s in (("signexp", 2.0 * h.standard_normal(7)), ("sigmoid", 3.0 * h.standard_normal(5)),
                    ("cosformer on positive scores", 0.2 + np.abs(h.standard_normal(6))),
                    ("linear", h.standard_normal(4)), ("tanhmax on a row of one", h.standard_normal(1)),
                    ("expressive on a longer row", 5.0 * h.standard_normal(11))):
        cases.append(_jacobian_case(name, activation(name.split()[0]), s, True))
    return cases


# ------------------------------------------------------------------------------
# 05 a wrong VJP that the all-ones cotangent passes
# ------------------------------------------------------------------------------

#: The coefficients of the linear combination of cotangents ``wrong_vjp`` is called with.
LINEAR_COMBINATION = (0.7, -1.3)


def _all_ones_case(kind, s, u, v, hidden, other_s):
    """Exercise 05's witness: 0 at the all-ones cotangent, not the true VJP at a random one, and a
    wrong sigsoftmax backward pass of the form step 2 proves vanishes at u = 1, ``a(s) (u - <u, p>)``
    with sigsoftmax's weights ``p``: one factor ``a(s)`` for every cotangent (so linear in it)."""
    act, ones = activation("sigsoftmax"), np.ones_like(s)
    a, b = LINEAR_COMBINATION
    xs = (ones, u, v, a * u + b * v, ones - u)  # the cotangents of calls 0-4
    calls = tuple(call("wrong_vjp", s, x) for x in xs) + (call("wrong_vjp", other_s, u),)
    form = ("is not of the form a(s) (x - <x, p>), with sigsoftmax's weights p and one factor a(s) for every "
            "cotangent x: the form step 2 proves is 0 at x = 1 (and a VJP is linear in x)")

    def expect():
        p = act(s)
        r = [x - np.sum(x * p, axis=-1, keepdims=True) for x in xs]  # x - <x, p>
        m = [np.abs(x) + np.sum(np.abs(x) * p, axis=-1, keepdims=True) for x in xs]  # bounds |x - <x, p>|
        bound = (s.shape[-1], float(np.max(_row_max(act.ell(s)))))
        true_u = activation_vjp(act, s, u)

        def same(i, j, label, message, passed, hint=None):
            return Expect("same_factor", label, (i,), np.stack([r[i], r[j], m[i], m[j]]), terms=((1.0, (j,)),),
                          bound=bound, message=message, passed=passed, hint=hint)

        return [
            same(0, 1, "wrong_vjp(s, 1), the all-ones cotangent, where the true VJP is 0",
                 "wrong_vjp(s, 1) is not 0 at the all-ones cotangent, where the true VJP is 0 (sigsoftmax's weights "
                 "sum to 1 in every row), to the rounding of its size: a gradient check with u = 1 fails it",
                 "wrong_vjp(s, 1) is 0 at the all-ones cotangent, as the true VJP is: a gradient check with u = 1 "
                 "passes it", hint="a wrong VJP that the all-ones cotangent passes must vanish at u = 1, as the true "
                                   "one does (sigsoftmax's weights sum to 1 in every row): check its value there"),
            Expect("far", "wrong_vjp(s, u), a random cotangent", (1,), true_u, rtol=1e-6,
                   message="wrong_vjp(s, u) equals the true VJP for a random cotangent: it is not wrong, so it "
                           "witnesses nothing",
                   passed="wrong_vjp(s, u) differs from the true VJP for a random cotangent, by more than 1e-06 "
                          "of the VJP's largest entry: a gradient check with a random cotangent fails it, where one "
                          "with the all-ones cotangent (the first check) passes it"),
            Expect("nonzero", "wrong_vjp(s, u)", (1,), true_u, rtol=1e-3,
                   message="wrong_vjp(s, u) is (almost) 0 for a random cotangent; write a plausible backward pass "
                           "that forgets a factor, as the statement asks",
                   passed="wrong_vjp(s, u) is not 0 for a random cotangent (a plausible backward pass)"),
            same(2, 1, "wrong_vjp(s, v) against wrong_vjp(s, u)", f"wrong_vjp {form}",
                 "wrong_vjp(s, u) and wrong_vjp(s, v) are one factor a(s) times u - <u, p> and v - <v, p>, with "
                 "sigsoftmax's weights p: the form step 2 proves is 0 at u = 1"),
            same(3, 1, f"wrong_vjp(s, {a:g} u + {b:g} v) against wrong_vjp(s, u)", f"wrong_vjp {form}",
                 f"wrong_vjp(s, {a:g} u + {b:g} v) has the same factor a(s): linear in the cotangent, as a VJP is"),
            same(4, 1, "wrong_vjp(s, 1 - u) against wrong_vjp(s, u)", f"wrong_vjp {form}",
                 "wrong_vjp(s, 1 - u) has the same factor a(s): linear in the cotangent, the all-ones one included"),
            Expect("differs", "wrong_vjp at other scores", (5,), terms=((1.0, (1,)),), rtol=1e-6,
                   message="wrong_vjp(s, u) does not depend on the scores s: a backward pass of sigsoftmax at s "
                           "uses its weights there",
                   passed="wrong_vjp depends on the scores s, as a backward pass does"),
        ]

    return Case(kind, calls, expect, hidden, s.ndim)


def all_ones_cases(hidden_seed, public_seed=None):
    rng = _rng(5, public_seed)
    s = 2.0 * rng.standard_normal((4, 6))
    cases = [_all_ones_case("2-D scores", s, rng.standard_normal(s.shape), rng.standard_normal(s.shape), False,
                            2.0 * rng.standard_normal(s.shape))]
    h = _hidden_rng(5, hidden_seed)
    for kind, shape in (("a 1-D row", (7,)), ("3-D scores", (2, 3, 5))):
        cases.append(_all_ones_case(kind, 3.0 * h.standard_normal(shape), h.standard_normal(shape),
                                    h.standard_normal(shape), True, 3.0 * h.standard_normal(shape)))
    return cases


# ------------------------------------------------------------------------------
# 06 signexp at a score of 0
# ------------------------------------------------------------------------------

#: The steps at which ``central_at_zero`` is compared with the first-order prediction.
CENTRAL_STEPS = (0.1, 1e-2, 1e-3)

#: The step of the long row's ``central_at_zero``, and how many of its scores are zeros (every fifth: numerically,
#: four forward passes of the row per zero).
LONG_EPS, LONG_ZERO_EVERY = 1e-3, 5


def _signexp_at_zeros(s, u, j):
    """Eqs. 09.Z3 and 09.Z4 at the zeros ``j`` of the row ``s`` (an index or an array of them): ``J``,
    ``L+``, ``L-``, and the sizes of the terms of ``J`` and ``L+-`` as ``F(0+) - F(0-)`` and the
    library's VJP form them. Every zero counts in ``R`` with ``e^0 = 1`` and in ``V`` with sign 0."""
    e = np.exp(np.abs(s))
    D, V, Va = np.sum(e), np.sum(u * np.sign(s) * e), np.sum(np.abs(u) * e)
    uj = u[j]
    R = D - 1.0  # sum over i != j of e^{|s_i|}, s_j = 0
    va = Va - np.abs(uj)
    jump = 2.0 * uj / D
    lp, lm = (uj * R - V) / D ** 2, (uj * R + V) / D ** 2
    return jump, lp, lm, 2.0 * (np.abs(uj) + va) / D, (np.abs(uj) * (R + 2.0) + va) / D ** 2


def _signexp_case(kind, s, u, j, hidden):
    act, tiny = activation("signexp"), 1e-300
    at = "" if hidden else f", j={j}"  # a hidden case names no input
    calls = (call("jump", s, u, j), call("slopes", s, u, j)) + tuple(call("central_at_zero", s, u, j, e_)
                                                                       for e_ in CENTRAL_STEPS)

    def expect():
        sp, sm = s.copy(), s.copy()
        sp[j], sm[j] = tiny, -tiny
        jump = float(u @ act(sp) - u @ act(sm))
        slopes = np.array([activation_vjp(act, sp, u)[j], activation_vjp(act, sm, u)[j]])
        _, _, _, size_j, size_l = _signexp_at_zeros(s, u, j)
        n, arg = s.size, float(np.max(np.abs(s)))
        inputs = {"s": s, "u": u}
        out = [_close(f"jump(s, u{at})", (0,), np.float64(jump), size_j, terms=n, argument=arg, inputs=inputs),
               _close(f"slopes(s, u{at}) = (L+, L-)", (1,), slopes, np.full(2, size_l), terms=n, argument=arg,
                      shape=(2,), inputs=inputs)]
        for k, e_ in enumerate(CENTRAL_STEPS):
            e = np.zeros_like(s)
            e[j] = e_
            measured = float(u @ act(s + e) - u @ act(s - e)) / (2.0 * e_)
            predicted = jump / (2.0 * e_) + 0.5 * (slopes[0] + slopes[1])
            out.append(_close(
                f"central_at_zero(s, u{at}, eps={e_:g}), the first-order prediction", (2 + k,), np.float64(predicted),
                size_j / (2.0 * e_) + size_l, terms=n, argument=arg, inputs=inputs,
                hints=((np.float64(measured), "your value is the measured central difference (F(eps) - F(-eps))/"
                        "(2 eps); the exercise asks for its first-order prediction from J and L+-, which differs "
                        "from it by O(eps)"),)))
        return out

    return Case(kind, calls, expect, hidden)


def _signexp_long_case(rng, hidden):
    s, u = _drawn(rng, (LONG_ROW,), 1.0, LONG_ZERO_EVERY), _drawn(rng, (LONG_ROW,))
    j = np.arange(0, LONG_ROW, LONG_ZERO_EVERY)
    calls = (call("jump", s, u, j), call("slopes", s, u, j), call("central_at_zero", s, u, j, LONG_EPS))

    def outputs():
        sa, ua = s.array(), u.array()
        jump, lp, lm, size_j, size_l = _signexp_at_zeros(sa, ua, j)
        n, arg = LONG_ROW, float(np.max(np.abs(sa)))
        return [((0,), "jump(s, u, j)", jump, tolerance(size_j, terms=n, argument=arg)),
                ((1, 0), "slopes(s, u, j)[0], L+", lp, tolerance(size_l, terms=n, argument=arg)),
                ((1, 1), "slopes(s, u, j)[1], L-", lm, tolerance(size_l, terms=n, argument=arg))]

    forms = [((0,), "jump(s, u, j)", j.shape), ((1, 0), "slopes(s, u, j)[0]", j.shape),
             ((1, 1), "slopes(s, u, j)[1]", j.shape), ((2,), "central_at_zero(s, u, j, eps)", j.shape)]
    return _long_case(f"a row of {LONG_ROW:,} scores, its {j.size:,} zeros at once, within the time limit (required)",
                      calls, outputs, forms, hidden)


def signexp_at_zero_cases(hidden_seed, public_seed=None):
    rng = _rng(6, public_seed)
    cases = []
    for trial in range(3):
        s, u = rng.standard_normal(6), rng.standard_normal(6)
        j = int(rng.integers(6))
        s[j] = 0.0
        cases.append(_signexp_case(f"row {trial + 1} of six scores", s, u, j, False))
    cases.append(_signexp_long_case(rng, False))
    h = _hidden_rng(6, hidden_seed)
    for kind, n, first in (("a row of two", 2, True), ("a row of three, the zero last", 3, False),
                           ("a row of nine, the zero first", 9, True)):
        s, u = h.standard_normal(n), h.standard_normal(n)
        j = 0 if first else n - 1
        s[j] = 0.0
        cases.append(_signexp_case(kind, s, u, j, True))
    cases.append(_signexp_long_case(h, True))
    return cases


# ------------------------------------------------------------------------------
# 07 Proposition 1 for TanhMax (Eq. 7, with its sign)
# ------------------------------------------------------------------------------


def _velocity_size(s, o, c, delta_I):
    """The size of the terms of ``-delta_I (w~ o - w^ <w^, o>) c`` (Eq. 03.P6 for tanhmax), ``w^ = tanh(s) w~``
    with tanh's terms of size 1 (:func:`_derivative_size`)."""
    wt = activation("tanhmax").p(s)  # softmax(log cosh s)
    return np.abs(delta_I * c[:, None]) * (wt * np.abs(o) + wt * np.sum(np.abs(wt * o), -1, keepdims=True))


def _velocity_case(kind, s, o, c, delta_I, hidden):
    from ..theory.proposition1 import score_velocity  # noqa: PLC0415

    label = "velocity(s, o, c, delta_I)"
    return Case(kind, (call("velocity", s, o, c, delta_I),), lambda: [_close(
        label, (0,), score_velocity("tanhmax", s, o, c, delta_I), _velocity_size(s, o, c, delta_I),
        terms=s.shape[-1], argument=_row_max(s), inputs=None if hidden else {"s": s, "o": o})], hidden)


def _velocity_long_case(rng, hidden):
    from ..theory.proposition1 import score_velocity  # noqa: PLC0415

    shape = (1, LONG_ROW)
    s, o, delta_I = _drawn(rng, shape, 2.0), _drawn(rng, shape), _drawn(rng, shape)
    c = rng.standard_normal(1)

    def outputs():
        sa, oa, da = s.array(), o.array(), delta_I.array()
        return [((0,), "velocity(s, o, c, delta_I)", score_velocity("tanhmax", sa, oa, c, da),
                 tolerance(_velocity_size(sa, oa, c, da), terms=LONG_ROW, argument=_row_max(sa)))]

    return _long_case(f"one instance of {LONG_ROW:,} tokens within the time limit (required)",
                      (call("velocity", s, o, c, delta_I),), outputs, [((0,), "velocity(s, o, c, delta_I)", shape)],
                      hidden)


def tanhmax_velocity_cases(hidden_seed, public_seed=None):
    rng = _rng(7, public_seed)
    N, n = 4, 6
    s = 2.0 * rng.standard_normal((N, n))
    # one row of large scores of both signs: cosh overflows there (cosh x > 1.8e308 for |x| > 710.5)
    s[-1] = np.where(rng.standard_normal(n) < 0, -1.0, 1.0) * rng.uniform(715.0, 790.0, n)
    o, delta_I = rng.standard_normal((N, n)), rng.standard_normal((N, n))
    cases = [_velocity_case("four instances, one with scores beyond 710 (cosh overflows)", s, o,
                            rng.standard_normal(N), delta_I, False)]
    cases.append(_required_finite("finite for scores beyond 710 (required)", cases[-1].calls, "velocity(s, o, c, delta_I)",
                                  "cosh and sinh overflow there, the weights do not"))
    cases.append(_velocity_long_case(rng, False))
    h = _hidden_rng(7, hidden_seed)
    for kind, N, n, scale in (("one instance of three tokens", 1, 3, 2.0),
                              ("scores between 711 and 740, of both signs", 3, 5, None),
                              ("many instances", 9, 7, 1.0)):
        s = scale * h.standard_normal((N, n)) if scale else np.sign(h.standard_normal((N, n))) * \
            h.uniform(711.0, 740.0, (N, n))
        cases.append(_velocity_case(kind, s, h.standard_normal((N, n)), h.standard_normal(N),
                                    h.standard_normal((N, n)), True))
        if scale is None:
            cases.append(_required_finite("finite for scores between 711 and 740 (required)", cases[-1].calls,
                                          "velocity(s, o, c, delta_I)", "cosh and sinh overflow there, the weights "
                                          "do not", hidden=True))
    cases.append(_velocity_long_case(h, True))
    return cases


# ------------------------------------------------------------------------------
# 08 Proposition 1 for a new activation: softplus-max
# ------------------------------------------------------------------------------


def _softplus_max_phi(s):
    h = _softplus(s)
    return h / anp.sum(h, axis=-1, keepdims=True)  # g = h = softplus, written directly


def _delta_II_size(s, o):
    """The size of the terms of ``Delta_II = w ell' (o - <w, o>)``, ``w ell' = sigmoid / sum softplus``."""
    with np.errstate(all="ignore"):
        sp = np.logaddexp(0.0, s)
        z = np.sum(sp, axis=-1, keepdims=True)
        sig = np.exp(-np.logaddexp(0.0, -s))
        return sig / z * (np.abs(o) + np.sum(sp / z * np.abs(o), axis=-1, keepdims=True))


def _delta_II_case(kind, s, o, hidden):
    label = "delta_II(s, o) (against autograd)"
    return Case(kind, (call("delta_II", s, o),), lambda: [_close(
        label, (0,), _autograd_vjp(_softplus_max_phi, s, o), _delta_II_size(s, o), terms=s.shape[-1],
        argument=_row_max(s), inputs=None if hidden else {"s": s, "o": o})], hidden, s.ndim)


def _delta_II_long_case(rng, hidden):
    s, o = _drawn(rng, (LONG_ROW,), 2.0), _drawn(rng, (LONG_ROW,))

    def outputs():
        sa, oa = s.array(), o.array()
        return [((0,), "delta_II(s, o)", activation_vjp(_softplus_max(), sa, oa),
                 tolerance(_delta_II_size(sa, oa), terms=LONG_ROW, argument=_row_max(sa)))]

    return _long_case(f"a row of {LONG_ROW:,} scores within the time limit (required)", (call("delta_II", s, o),),
                      outputs, [((0,), "delta_II(s, o)", (LONG_ROW,))], hidden)


def prop1_new_cases(hidden_seed, public_seed=None):
    rng = _rng(8, public_seed)
    cases = [_delta_II_case(kind, scale * rng.standard_normal(shape), rng.standard_normal(shape), False)
             for kind, shape, scale in (("a 1-D row", (7,), 2.0), ("2-D scores", (3, 5), 2.0),
                                        ("scores of size 20", (2, 6), 20.0))]
    s = np.array([[-60.0, -45.0, 0.5, 2.0, -50.0], [800.0, -800.0, 1.0, -900.0, 3.0]])
    if public_seed is not None:  # the same kinds of scores, on other values
        s = s * rng.uniform(0.95, 1.05, s.shape)
    cases.append(_delta_II_case("scores far below 0 (softplus underflows) and beyond 710", s,
                                rng.standard_normal(s.shape), False))
    cases.append(_required_finite("finite for scores far below 0 and beyond 710 (required)", cases[-1].calls,
                                  "delta_II(s, o)", "softplus underflows to 0 there (ell' = sigmoid/softplus is 0/0 "
                                                    "as written) and e^s overflows"))
    cases.append(_delta_II_long_case(rng, False))
    h = _hidden_rng(8, hidden_seed)
    for kind, shape, scale in (("3-D scores", (2, 3, 4), 2.0), ("scores of size 30", (3, 5), 30.0),
                               ("another 1-D row", (5,), 1.0), ("scores of size 400", (2, 6), 400.0)):
        cases.append(_delta_II_case(kind, scale * h.standard_normal(shape), h.standard_normal(shape), True))
    cases.append(_required_finite("finite for scores of size 400 (required)", cases[-1].calls, "delta_II(s, o)",
                                  "softplus underflows or e^s overflows there", hidden=True))
    cases.append(_delta_II_long_case(h, True))
    return cases


# ------------------------------------------------------------------------------
# 09 the closure gap of Proposition 2
# ------------------------------------------------------------------------------


def _gap_argument(s, cs):
    """The arguments of the exponentials in ``log q = -2c + logsumexp(-s) - logsumexp(s)``, per shift."""
    return np.abs(2.0 * cs) + abs(float(np.logaddexp.reduce(s))) + abs(float(np.logaddexp.reduce(-s)))


def _gap_case(kind, s, cs, hidden, numeric=True):
    shifts = "the case's shifts" if hidden else f"c in {cs.tolist()}"  # a hidden case names no input

    def expect():
        from ..theory.proposition2 import closure_gap, closure_gap_closed_form  # noqa: PLC0415

        want = closure_gap_closed_form(s, cs)
        big = np.flatnonzero(want > 1e-3)  # where the difference of two forward passes is accurate
        out = [_close(f"gap(s, c) for {shifts} (relative accuracy)", ("stack", *range(len(cs))), want, want,
                      terms=s.size, argument=_gap_argument(s, cs), inputs={"c": cs})]
        if numeric and big.size:  # the forward passes' difference: terms of size 1 (weights), exponentials of s + c
            out.append(_close("gap(s, c) against the forward passes, where the gap exceeds 1e-3",
                              ("stack", *big.tolist()), closure_gap(s, cs[big]), np.full(big.size, 2.0),
                              terms=s.size, argument=np.abs(cs[big]) + float(np.max(np.abs(s)))))
        return out

    return Case(kind, tuple(call("gap", s, float(c)) for c in cs), expect, hidden)


def _gap_finite(kind, case, hidden):
    n = len(case.calls)
    return _required_finite(kind, case.calls, "gap(s, c)", "e^s or e^{-2c} overflows there, log q does not",
                            where=("stack", *range(n)), hidden=hidden)


def closure_gap_cases(hidden_seed, public_seed=None):
    rng = _rng(9, public_seed)
    # e^{-2c} overflows float64 for c < -354.9, e^{s} for s > 709.8: a direct A, B, e^{-2c} fails here
    cs = np.array([-400.0, -300.0, -5.0, -1.0, 0.0, 0.5, 2.0, 10.0, 30.0, 100.0, 300.0])
    cases = [_gap_case(f"row {trial + 1}, shifts from -400 to 300", rng.standard_normal(int(rng.integers(2, 7))),
                       cs, False) for trial in range(3)]
    big = np.array([1.0, -1.0, 1.0, -1.0]) * rng.uniform(720.0, 800.0, 4)
    cases.append(_gap_case("scores beyond 710 (e^s overflows), shifts from -5 to 300", np.append(big, 0.3),
                           cs[2:], False, False))
    cases.append(_gap_finite("finite for scores beyond 710 (required)", cases[-1], False))
    h = _hidden_rng(9, hidden_seed)
    cases.append(_gap_case("a row of one score", h.standard_normal(1), np.sort(h.uniform(-300, 300, 6)), True))
    cases.append(_gap_case("scores beyond 710, of both signs", np.where(h.standard_normal(4) < 0, -1.0, 1.0)
                           * h.uniform(711.0, 900.0, 4), np.sort(h.uniform(-290.0, 250.0, 5)), True, False))
    cases.append(_gap_finite("finite for scores beyond 710 of both signs (required)", cases[-1], True))
    cases.append(_gap_case("other shifts", h.standard_normal(5), np.sort(h.uniform(-20.0, 40.0, 8)), True))
    return cases


# ------------------------------------------------------------------------------
# 10 the Neural Attention score's VJP
# ------------------------------------------------------------------------------


def _neural_inputs(rng, n_q, n_k, d, d_prime, hidden_size, scale=1.0):
    q, k = scale * rng.standard_normal((n_q, d)), scale * rng.standard_normal((n_k, d))
    params = score("neural").init_params(d, rng, d_prime=d_prime, hidden_size=hidden_size)
    params["ba"] = np.asarray(0.3)
    return q, k, params, rng.standard_normal((n_q, n_k))


def _neural_sizes(q, k, params, G):
    """``(sizes, argument, terms)`` of the neural score's VJP (derivation 02, section 5.6): each
    gradient's terms in absolute value, by name (the backward pass run on ``|G|``, ``|W|`` and the
    terms ``1 + t^2`` of ``1 - t^2``); the size of ``z``, the tanh's argument; the longest sum."""
    P = {n: np.abs(np.asarray(v, dtype=np.float64)) for n, v in params.items()}
    beta = 1.0 / math.sqrt(q.shape[-1])
    z = ((q @ params["Wq"].T) @ params["Whq"].T)[:, None, :] + ((k @ params["Wk"].T) @ params["Whk"].T)[None] \
        + params["bh"]
    t = np.tanh(z)
    aq, ak = np.abs(q) @ P["Wq"].T, np.abs(k) @ P["Wk"].T
    az = (aq @ P["Whq"].T)[:, None, :] + (ak @ P["Whk"].T)[None] + P["bh"]
    gz = beta * np.abs(G)[..., None] * P["wa"] * (1.0 + t * t)
    da, db = gz.sum(1), gz.sum(0)
    dqp, dkp = da @ P["Whq"], db @ P["Whk"]
    sizes = {"q": dqp @ P["Wq"], "k": dkp @ P["Wk"], "Wq": dqp.T @ np.abs(q), "Wk": dkp.T @ np.abs(k),
             "Whq": da.T @ aq, "Whk": db.T @ ak, "bh": gz.sum((0, 1)),
             "wa": beta * np.einsum("ij,ijh->h", np.abs(G), np.abs(t)), "ba": beta * np.sum(np.abs(G))}
    return sizes, float(np.max(az)), q.shape[0] + k.shape[0] + q.shape[1] + sum(np.shape(params["Whq"]))


def _neural_expects(want, q, k, params, G, suffix=""):
    """One expectation per gradient of ``neural_vjp``'s value ``(dq, dk, dparams)``."""
    sizes, arg, n = _neural_sizes(q, k, params, G)
    out = [_close(f"dq{suffix}", (0, 0), want["q"], sizes["q"], terms=n, argument=arg, shape=q.shape),
           _close(f"dk{suffix}", (0, 1), want["k"], sizes["k"], terms=n, argument=arg, shape=k.shape)]
    return out + [_close(f"dparams[{name!r}]{suffix}", (0, 2, name), want[name], sizes[name], terms=n, argument=arg,
                         shape=np.shape(v)) for name, v in params.items()]


def _neural_case(kind, q, k, params, g, hidden):
    def expect():
        dq, dk, dp = score_vjp("neural", q, k, params, g)
        return _neural_expects({"q": dq, "k": dk, **dp}, q, k, params, g)

    return Case(kind, (call("neural_vjp", q, k, params, g),), expect, hidden)


def _neural_autograd_case(kind, q, k, params, g, hidden):
    def expect():
        sc = score("neural")
        names = ["q", "k", *params]
        args = [q, k, *(np.asarray(v, dtype=np.float64) for v in params.values())]

        def forward(*xs):
            return sc(xs[0], xs[1], dict(zip(names[2:], xs[2:])))

        want = {}
        for i, name in enumerate(names):
            vjp_fn, _ = make_vjp(lambda x, i=i: forward(*args[:i], x, *args[i + 1:]))(args[i])
            want[name] = vjp_fn(g)
        return _neural_expects(want, q, k, params, g, " (against autograd)")

    return Case(kind, (call("neural_vjp", q, k, params, g),), expect, hidden)


#: The long case's sizes: n_q, n_k, d, d', h. Its 200,000 projection weights (Wq, Wk) are as many directions a
#: forward-mode derivative needs a forward pass each for; the derived VJP takes a few matrix products in all.
NEURAL_LONG = (100, 100, 500, 200, 32)


def _neural_long_case(rng, hidden):
    n_q, n_k, d, dp, hs = NEURAL_LONG
    shapes = {"Wq": (dp, d), "Wk": (dp, d), "Whq": (hs, dp), "Whk": (hs, dp), "bh": (hs,), "wa": (hs,)}
    params = {n: _drawn(rng, shape, 1.0 / math.sqrt(shape[-1])) for n, shape in shapes.items()}
    params["ba"] = np.asarray(0.3)
    q, k, g = _drawn(rng, (n_q, d)), _drawn(rng, (n_k, d)), _drawn(rng, (n_q, n_k))

    def outputs():
        P = {n: v.array() if isinstance(v, Drawn) else v for n, v in params.items()}
        qa, ka, ga = q.array(), k.array(), g.array()
        dq, dk, dpar = score_vjp("neural", qa, ka, P, ga)
        sizes, arg, n = _neural_sizes(qa, ka, P, ga)
        want = {"q": dq, "k": dk, **dpar}
        where = {"q": (0, 0), "k": (0, 1), **{name: (0, 2, name) for name in P}}
        return [(where[name], "dq" if name == "q" else "dk" if name == "k" else f"dparams[{name!r}]", want[name],
                 tolerance(sizes[name], terms=n, argument=arg)) for name in where]

    forms = [((0, 0), "dq", (n_q, d)), ((0, 1), "dk", (n_k, d))] + [
        ((0, 2, name), f"dparams[{name!r}]", shapes.get(name, ())) for name in params]
    return _long_case(f"{n_q} queries and keys of dimension {d}, {2 * dp * d:,} projection weights, within the time "
                      f"limit (required)", (call("neural_vjp", q, k, params, g),), outputs, forms, hidden)


def neural_vjp_cases(hidden_seed, public_seed=None):
    rng = _rng(10, public_seed)
    cases = [_neural_case("3 queries, 4 keys, d = 5", *_neural_inputs(rng, 3, 4, 5, 3, 6), False),
             _neural_autograd_case("against autograd's VJP of the score's forward pass",
                                   *_neural_inputs(rng, 2, 3, 4, 3, 5), False),
             _neural_long_case(rng, False)]
    h = _hidden_rng(10, hidden_seed)
    cases += [_neural_case(kind, *_neural_inputs(h, *sizes), True)
              for kind, sizes in (("one query", (1, 5, 2, 4, 3)), ("one key", (4, 1, 3, 2, 5)),
                                  ("large inputs (tanh saturates)", (3, 3, 4, 3, 4, 4.0)))]
    cases.append(_neural_autograd_case("against autograd at other sizes", *_neural_inputs(h, 3, 2, 3, 2, 3), True))
    cases.append(_neural_long_case(h, True))
    return cases


# ------------------------------------------------------------------------------
# 11 expressive against dot-product on an angle
# ------------------------------------------------------------------------------

#: How closely the two contrasts must agree at the answer's c (relative).
CONTRAST_RTOL = 1e-8


def _log_contrast_gap(c, ct):
    """``log`` of the DPA contrast over the EA contrast at ``c`` (Eqs. 07.EG3, 07.EG4): increasing in ``c``."""
    from ..studies.geometry import weight_ratio  # noqa: PLC0415

    return math.log(float(weight_ratio("softmax", 1.0, ct, c=c))) - \
        math.log(float(weight_ratio("expressive", 1.0, ct, c=c)))


def crossover_angle(theta):
    """``(c*, slope)``: the ``c`` where the two contrasts are equal (bisection on ``log c``) and the
    derivative of the log contrast gap there, which turns a relative contrast tolerance into one on ``c``."""
    ct = math.cos(theta)
    lo, hi = 1e-12, 1.0
    while _log_contrast_gap(hi, ct) < 0:
        hi *= 2.0
    for _ in range(64):  # the bracket's log-width halves each time: 64 halvings leave c to a float's rounding
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if _log_contrast_gap(mid, ct) < 0 else (lo, mid)
    c = math.sqrt(lo * hi)
    dc = 1e-6 * c
    return c, (_log_contrast_gap(c + dc, ct) - _log_contrast_gap(c - dc, ct)) / (2.0 * dc)


def _angle_case(deg, hidden):
    def expect():
        c, slope = crossover_angle(math.radians(deg))
        return [Expect("close", f"crossover(theta) at {deg:.4g} degrees" if not hidden else "crossover(theta)", (0,),
                       np.float64(c), rtol=0.0, atol=CONTRAST_RTOL / slope,
                       low="at your c, EA is still the sharper one (its contrast is larger), so c is too small",
                       high="at your c, DPA is already the sharper one, so c is too large")]

    return Case(f"{deg:.4g} degrees" if not hidden else "an angle of the hidden set",
                (call("crossover", math.radians(deg)),), expect, hidden)


def expressive_angle_cases(hidden_seed, public_seed=None):
    degrees = np.array([5.0, 20.0, 45.0, 60.0, 75.0, 89.0])
    if public_seed is not None:  # the same spread of angles, other values
        degrees = degrees + _rng(11, public_seed).uniform(-0.9, 0.9, degrees.size)
    cases = [_angle_case(float(deg), False) for deg in degrees]
    h = _hidden_rng(11, hidden_seed)
    cases += [_angle_case(float(deg), True) for deg in h.uniform(1.0, 89.0, 3)]
    cases += [_angle_case(float(h.uniform(0.3, 0.7)), True), _angle_case(float(h.uniform(89.85, 89.95)), True)]
    cases[-2].kind, cases[-1].kind = "an angle near 0", "an angle near 90 degrees"
    return cases


# ------------------------------------------------------------------------------
# 12 the no-normaliser convention
# ------------------------------------------------------------------------------


def _weights_case(kind, s, mask, hidden):
    act = activation("expressive")
    label = "expressive_weights(s, mask)"

    def expect():
        want = act(s, mask=mask)
        with np.errstate(all="ignore"):
            ell = act.ell(s)  # the library's weights are softmax(ell): exponentials of arguments up to |ell|
        return [Expect("finite", label, (0,), shape=s.shape,
                       hint="NaN or inf in the weights: 0/0 where a row has no normaliser (the convention gives it "
                            "weights 0), or inf/inf where z^2 overflows (write h = 1/(1 + 1/z^2))",
                       passed="every weight finite"),
                _close(label, (0,), want, want, terms=s.shape[-1], argument=_row_max(ell), inputs={"s": s})]

    return Case(kind, (call("expressive_weights", s, None if mask is None else mask),), expect, hidden,
                s.ndim if mask is None else None)  # (the axis hint reads unmasked cases only, as in exercise 03)


def _weights_finite(case):
    return _required_finite(f"{case.kind}: never NaN (required)", case.calls, "expressive_weights(s, mask)",
                            "a row without a normaliser gets weights 0, and h = 1/(1 + 1/z^2) does not overflow",
                            hidden=case.hidden)


#: Exercise 12's cases whose property the statement requires: weights, never NaN.
NO_NAN = ("an all-zero row (no normaliser)", "scores of 1e200 (z^2 overflows)",
          "scores of 1e-200 (h underflows: no normaliser)", "a random mask with a fully masked row",
          "huge and tiny scores in one row")


def _around_sqrt_tiny(rng):
    """Scores just below sqrt(tiny) (counted as 0) and just above it (tiny, but counted)."""
    tiny = math.sqrt(np.finfo(np.float64).tiny)  # 1.49e-154
    return tiny * rng.uniform(0.5, 0.95, 3), tiny * rng.uniform(1e3, 1e5, 3)


def no_normaliser_cases(hidden_seed, public_seed=None):
    rng = _rng(12, public_seed)
    rows = {
        "ordinary rows": rng.standard_normal((2, 5)),
        "a row with an exact zero": np.array([0.7, 0.0, -1.2, 2.0, 0.1]),
        "an all-zero row (no normaliser)": np.zeros(5),
        "scores of 1e200 (z^2 overflows)": np.array([1e200, 1.0, 0.0, -3e180, 2.0]),
        "scores of 1e-200 (h underflows: no normaliser)": np.array([1e-200, -1e-170, 0.0, 0.0, 1e-180]),
        "small scores (h ~ z^2)": np.array([1e-3, -2e-4, 5e-4, 1e-3, 3e-3]),
    }
    if public_seed is not None:  # the same kinds of rows, other values (zeros stay zeros; the zero row, longer)
        rows = {k: v * rng.uniform(0.5, 2.0, np.shape(v)) * rng.choice([-1.0, 1.0], np.shape(v))
                for k, v in rows.items()}
        rows["an all-zero row (no normaliser)"] = np.zeros(int(rng.integers(6, 12)))
    below, above = _around_sqrt_tiny(rng)  # the convention the statement requires, public too
    rows["scores just below sqrt(tiny), about 1e-154 (count as 0)"] = np.array([below[0], -below[1], 0.0, below[2]])
    rows["both sides of sqrt(tiny) in one row"] = np.array([below[0], above[0], 0.0, -below[1], -above[1]])
    cases = [_weights_case(kind, s, None, False) for kind, s in rows.items()]
    s = rng.standard_normal((4, 5))
    s[1, 2] = 0.0
    mask = rng.random((4, 5)) < 0.7
    mask[2] = False
    cases.append(_weights_case("a random mask with a fully masked row", s, mask, False))
    h = _hidden_rng(12, hidden_seed)
    below, above = _around_sqrt_tiny(h)
    hidden = {
        "scores just below sqrt(tiny), about 1e-154 (count as 0)": below * np.array([1.0, -1.0, 1.0]),
        "scores above sqrt(tiny), about 1e-150 (h ~ z^2 is tiny but counts)": above * np.array([1.0, -1.0, 1.0]),
        "both sides of sqrt(tiny) in one row": np.array([below[0], above[0], 0.0, -below[1]]),
        "huge and tiny scores in one row": np.array([1e300, -1e300, 1e-300, 5.0 * h.random()]),
    }
    cases += [_weights_case(kind, s, None, True) for kind, s in hidden.items()]
    s = 2.0 * h.standard_normal((2, 3, 4))
    s[0, 1] = 0.0
    mask = h.random((2, 3, 4)) < 0.6
    mask[1, 2] = False
    cases.append(_weights_case("3-D scores with a mask, a zero row and a masked row", s, mask, True))
    return cases + [_weights_finite(c) for c in cases if c.kind in NO_NAN]


# ------------------------------------------------------------------------------
# 13 the central-difference step
# ------------------------------------------------------------------------------


def error_bound(h, S, M, kappa):
    """Truncation plus rounding error of a central difference with step ``h`` (derivation 22, section 4)."""
    return M * h * h / 6.0 + kappa * UNIT_ROUNDOFF * S / h


def best_step(S, M, kappa):
    """The step that minimises :func:`error_bound` (derivation 22, section 4)."""
    return (3.0 * kappa * UNIT_ROUNDOFF * S / M) ** (1.0 / 3.0)


def _best_step_close(label, where, S, M, K, inputs=None):
    """best_step's value, within the rounding of a cube root of ``x = 3 kappa u_r S / M`` (a power ``1/3``
    rounded to a float turns into a relative error of about ``u_r |log x|``)."""
    want = best_step(S, M, K)
    return _close(label, where, want, want, terms=4, argument=np.abs(np.log(3.0 * K * UNIT_ROUNDOFF * S / M)),
                  inputs=inputs)


def _step_cases(rng, decades, hidden, suffix=""):
    S, M = 10.0 ** rng.uniform(-decades, decades, 6), 10.0 ** rng.uniform(-decades, decades, 6)
    K = 10.0 ** rng.uniform(0, 2, 6)
    h = best_step(S, M, K) * np.array([0.3, 1.0, 3.0, 0.5, 2.0, 1.7])
    inputs = {"S": S, "M": M, "kappa": K}
    best = Case(f"best_step{suffix}", tuple(call("best_step", *a) for a in zip(S, M, K)),
                lambda: [_best_step_close("best_step(S, M, kappa)", ("stack", *range(6)), S, M, K, inputs)], hidden)
    bound = Case(f"error_bound{suffix}", tuple(call("error_bound", *a) for a in zip(h, S, M, K)),
                 lambda: [_close("error_bound(h, S, M, kappa)", ("stack", *range(6)), error_bound(h, S, M, K),
                                 error_bound(h, S, M, K), terms=4, inputs=inputs)], hidden)  # two positive terms
    return [best, bound]


def central_step_cases(hidden_seed, public_seed=None):
    rng = _rng(13, public_seed)
    cases = _step_cases(rng, 3, False, " for six random (S, M, kappa) over six decades")
    S, M = np.array([1.0]), np.array([1.0 if public_seed is None else rng.uniform(0.5, 2.0)])  # exp at 0: |f| = 1
    cases.append(Case("the step for exp'(0), with S = |f| = 1 and M = max |F'''| about 1",
                      (call("best_step", float(S[0]), float(M[0])),),
                      lambda S=S, M=M: [_best_step_close(f"best_step(1.0, {float(M[0])!r}), kappa left at its default",
                                                         ("stack", 0), S, M, np.ones(1))]))
    h = _hidden_rng(13, hidden_seed)
    cases += _step_cases(h, 8, True, " over sixteen decades")
    S, M = 10.0 ** h.uniform(-4, 4, 3), 10.0 ** h.uniform(-4, 4, 3)
    cases.append(Case("kappa left at its default", tuple(call("best_step", s_, m_) for s_, m_ in zip(S, M)),
                      lambda: [_best_step_close("best_step(S, M) with kappa left out", ("stack", 0, 1, 2), S, M,
                                                np.ones(3))], True))
    return cases


# ------------------------------------------------------------------------------
# 14 the smallest shift (a number)
# ------------------------------------------------------------------------------

#: The row and the target of exercise 14.
CLOSURE_ROW, CLOSURE_TOL = np.array([0.5, -1.0, 1.5, 0.2]), 1e-6


def closure_shift():
    """The smallest ``c`` with ``closure_gap_closed_form(CLOSURE_ROW, c) <= CLOSURE_TOL`` (Eq. 05.P10)."""
    s, t = CLOSURE_ROW, CLOSURE_TOL
    log_ratio = np.logaddexp.reduce(-s) - np.logaddexp.reduce(s)  # log(B / A)
    q = t / (2.0 - t)  # 2q / (1 + q) = t
    return 0.5 * (log_ratio - math.log(q))  # q = (B/A) e^{-2c}


def closure_witness_cases(hidden_seed, public_seed=None):
    def expect():
        best = closure_shift()
        # one message either way: a direction would let repeated submissions bisect to the answer
        wrong = "ANSWER is not the smallest shift c with gap <= 1e-6 (to within 1%)"
        return [Expect("range", "ANSWER", (0,), np.array([best - 1e-9 * abs(best), best + 0.01 * abs(best)]),
                       low=wrong, high=wrong, passed="ANSWER is the smallest shift with gap <= 1e-6, within 1%")]

    return [Case("the smallest shift for s = (0.5, -1, 1.5, 0.2)", (value("ANSWER"),), expect, secret=True)]


# ------------------------------------------------------------------------------
# The registry
# ------------------------------------------------------------------------------

_ACT = "refattn.core.activations"

EXERCISES = (
    Exercise(1, "softmax-vjp", "Derive softmax's vector-Jacobian product", "function",
             ("softmax_vjp(s, u)",), softmax_vjp_cases, part=1, difficulty=1, minutes=20,
             library=(f"{_ACT}:Softmax.backward",)),
    Exercise(2, "tanhmax-derivatives", "TanhMax's ell, rho' and ell', stable for every finite score",
             "function", ("ell(s)", "drho(s)", "dell(s)"), tanhmax_derivatives_cases, part=1, difficulty=1,
             minutes=20, library=(f"{_ACT}:TanhMax.ell", f"{_ACT}:TanhMax.drho", f"{_ACT}:TanhMax.dell")),
    Exercise(3, "reweighted-vjp", "One VJP for every activation (Eqs. 01.R4/01.R5)", "function",
             ("reweighted_vjp(p, rho, drho, dell, u)",), reweighted_vjp_cases, part=1, difficulty=2, minutes=30,
             library=(f"{_ACT}:Activation.backward",)),
    Exercise(4, "jacobian", "The Jacobian of phi = rho * softmax(ell) (Eq. 01.R3)", "function",
             ("jacobian(act, s)",), jacobian_cases, part=1, difficulty=2, minutes=25,
             library=(f"{_ACT}:Activation.jacobian",)),
    Exercise(5, "all-ones-cotangent", "A wrong sigsoftmax VJP that the all-ones cotangent passes",
             "function", ("wrong_vjp(s, u)",), all_ones_cases, part=1, difficulty=2, minutes=25,
             library=(f"{_ACT}:Softmax.backward", f"{_ACT}:SigSoftmax.ell")),
    Exercise(6, "signexp-at-zero", "SignExp at a score of 0: the jump, the slopes, the spike", "function",
             ("jump(s, u, j)", "slopes(s, u, j)", "central_at_zero(s, u, j, eps)"), signexp_at_zero_cases,
             part=2, difficulty=3, minutes=45,
             library=("refattn.theory.signexp_at_zero:signexp_near_zero",
                      "refattn.theory.signexp_at_zero:_quotient_closed_form")),
    Exercise(7, "tanhmax-velocity", "Proposition 1 for TanhMax, with the sign of Eq. 7 corrected",
             "function", ("velocity(s, o, c, delta_I)",), tanhmax_velocity_cases, part=2, difficulty=2,
             minutes=35, library=("refattn.theory.proposition1:tanhmax_velocity",
                                  "refattn.theory.proposition1:tanhmax_weights")),
    Exercise(8, "prop1-new-activation", "Proposition 1's Delta_II for a new activation (softplus-max)",
             "function", ("delta_II(s, o)",), prop1_new_cases, part=2, difficulty=2, minutes=35,
             library=("refattn.theory.proposition1:delta_II", "refattn.theory.proposition1:closed_form_delta_II")),
    Exercise(9, "closure-gap", "Proposition 2: the exact distance from softmax to TanhMax's range",
             "function", ("gap(s, c)",), closure_gap_cases, part=2, difficulty=3, minutes=40,
             library=("refattn.theory.proposition2:closure_gap_closed_form",)),
    Exercise(10, "neural-score-vjp", "The VJP of the Neural Attention score", "function",
             ("neural_vjp(q, k, params, grad_s)",), neural_vjp_cases, part=3, difficulty=3, minutes=60,
             library=("refattn.core.scores:Neural.backward",)),
    Exercise(11, "expressive-angle", "When is expressive attention sharper than dot-product on an angle?",
             "function", ("crossover(theta)",), expressive_angle_cases, part=2, difficulty=2, minutes=30,
             library=("refattn.exercises.graders:crossover_angle", "refattn.exercises.graders:_log_contrast_gap")),
    Exercise(12, "no-normaliser", "Expressive weights with zeros, masks and no normaliser", "function",
             ("expressive_weights(s, mask)",), no_normaliser_cases, part=3, difficulty=2, minutes=30,
             library=(f"{_ACT}:Expressive.ell", f"{_ACT}:Activation.forward")),
    Exercise(13, "central-difference-step", "The best step for central differences", "function",
             ("best_step(S, M, kappa=1.0)", "error_bound(h, S, M, kappa=1.0)"), central_step_cases, part=3,
             difficulty=1, minutes=20,
             library=("refattn.exercises.graders:best_step", "refattn.exercises.graders:error_bound")),
    Exercise(14, "closure-witness", "A numeric witness for the closure: the smallest shift", "number",
             ("ANSWER",), closure_witness_cases, part=2, difficulty=1, minutes=15,
             library=("refattn.exercises.graders:closure_shift",)),
    Exercise(15, "gradient-check", "Build a gradient check", "function",
             ("weights(name, s)", "gradient_check(name, s, jac, seed)"), gradient_check_cases, part=3,
             difficulty=3, minutes=45,
             library=("refattn.core.gradcheck:_central_differences", "refattn.core.gradcheck:gradcheck")),
)
