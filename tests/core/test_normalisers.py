"""The denominator offset and the newer normalisers (``derivations/25-normalisers.md``).

The generic checks (three-way VJPs, closed forms, masks, extremes, dtypes)
run over these activations in ``test_activations.py``; here are the facts
that belong to the offset and to each new row: the phantom key, the
gradient with respect to ``log c``, the authors' public formulas on random
and extreme scores, and the behaviour at each singular point.
"""

import numpy as np
import pytest

from refattn import activation
from refattn.core.activations import NORMALISERS, SigSoftmax, TanhMax, Expressive
from refattn.core.gradcheck import gradcheck

from tests.support import RTOL_AUTOGRAD, RTOL_CENTRAL, random_scores


def _with_offset(cls, c):
    """``cls`` with the denominator offset ``c``: phi_i = g(s_i) / (c + sum_k h(s_k))."""
    return type(cls.__name__ + "Offset", (cls,), {"offset": c, "name": cls.name + "+c"})()


def _phantom_key(act, s, c):
    """Eq. 25.O1 by hand for one row: rho * softmax([ell(s), log c]) without the phantom entry."""
    ell = np.append(act.ell(s), np.log(c))
    e = np.exp(ell - ell.max())
    return act.rho(s) * (e / e.sum())[:-1]


@pytest.mark.parametrize("cls", [TanhMax, Expressive, SigSoftmax])
@pytest.mark.parametrize("c", [1e-3, 0.7, 30.0])
def test_offset_is_a_phantom_key_and_its_vjp_checks_three_ways(cls, c, rng):
    act = _with_offset(cls, c)
    s = random_scores(cls.name, (6,), rng)
    np.testing.assert_allclose(act(s), act.g(s) / (c + act.h(s).sum()), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(act(s), _phantom_key(act, s, c), rtol=1e-12, atol=1e-15)
    s = random_scores(cls.name, (2, 3, 5), rng)
    mask = rng.random(s.shape) < 0.7
    for checks, rtol in ((("autograd",), RTOL_AUTOGRAD), (("central",), RTOL_CENTRAL)):
        gradcheck(lambda s: act(s, axis=1, mask=mask), {"s": s},
                  lambda u, s: {"s": act.backward(u, act.forward(s, axis=1, mask=mask)[1])},
                  checks=checks, rtol=rtol, atol=1e-12, name=act.name).assert_ok()


def test_softmax1_is_softmax_with_a_zero_score_key(rng):
    s = 3 * rng.standard_normal(7)
    full = activation("softmax")(np.append(s, 0.0))  # the phantom key of score 0, a real key here
    np.testing.assert_allclose(activation("softmax1")(s), full[:-1], rtol=1e-13)
    assert activation("softmax1")(s).sum() < 1
    np.testing.assert_allclose(activation("softmax1")(-800.0 + s), 0.0, atol=1e-300)  # may attend to nothing


def test_gradient_with_respect_to_log_c(rng):
    """d phi_j / d log c = -p_0 phi_j with p_0 = c / (c + sum_k h_k), so d(log c) = -p_0 <u, phi> (Eq. 25.O4)."""
    c, eps = 0.4, 1e-6
    s, u = random_scores("tanhmax", (6,), rng), rng.standard_normal(6)
    act = _with_offset(TanhMax, c)
    phi = act(s)
    p0 = c / (c + act.h(s).sum())
    up, down = _with_offset(TanhMax, c * np.exp(eps))(s), _with_offset(TanhMax, c * np.exp(-eps))(s)
    central = u @ (up - down) / (2 * eps)
    assert abs(-p0 * (u @ phi) - central) <= 1e-8 * abs(central)


def test_a_row_of_zeros_now_has_a_normaliser(rng):
    """Softpick at scores of about 1e-10: with its eps (1e-8), weights of about 0.01, the paper's; without
    it, a ratio of tiny numbers of order 1. A row of exact zeros: weights and gradient 0."""
    s = 1e-10 * rng.standard_normal(6)
    ours = activation("softpick")(s)
    paper = np.maximum(np.expm1(s), 0) / (np.abs(np.expm1(s)).sum() + 1e-8)  # expm1: e^s - 1 without cancellation
    np.testing.assert_allclose(ours, paper, rtol=1e-7)
    without = _with_offset(type(activation("softpick")), 0.0)(s)
    assert without.max() > 5 * ours.max() and ours.max() < 0.05
    zero = np.zeros(4)
    _, cache = activation("softpick").forward(zero)
    assert np.all(activation("softpick")(zero) == 0)
    assert np.all(activation("softpick").backward(rng.standard_normal(4), cache) == 0)


def _softpick_authors(x, eps=1e-8):
    """The authors' numerically stable form (zaydzuhri/softpick-attention), transcribed in NumPy: the row
    maximum m factored out, so their eps stands for eps e^m in the paper's formula."""
    m = x.max(-1, keepdims=True)
    e = np.exp(x - m) - np.exp(-m)
    return np.maximum(e, 0) / (np.abs(e).sum(-1, keepdims=True) + eps)


def _stablemax_authors(x, epsilon=1e-30):
    """StableMax's s(x) as the authors' code writes it, normalised along the last axis."""
    with np.errstate(divide="ignore", invalid="ignore"):
        sx = np.where(x < 0, 1 / (1 - x + epsilon), x + 1)
    return sx / sx.sum(-1, keepdims=True)


EXTREME = np.array([[700.0, 699.0, -700.0, 0.5], [-1e300, 1e300, 3.0, -2.0],
                    [1e-100, -1e-100, 1e-12, -1e-12], [-5.0, -1.0, -3.0, -0.1]])


def test_softpick_matches_the_authors_code_on_random_and_extreme_scores(rng):
    """The two readings of eps (c = eps, or eps e^{max s}) differ by a relative eps at most (derivation 25, 2.2).
    On the row of scores near 1e-12 the authors' e^x - 1 loses digits (relative 2e-5); the paper's formula
    written with expm1 does not, and the library agrees with that."""
    act = activation("softpick")
    for x in (3 * rng.standard_normal((5, 9)), EXTREME[[0, 1, 3]]):
        theirs = _softpick_authors(x)
        np.testing.assert_allclose(act(x), theirs, rtol=1e-7, atol=1e-300)
    tiny = EXTREME[2]
    paper = np.maximum(np.expm1(tiny), 0) / (np.abs(np.expm1(tiny)).sum() + 1e-8)
    np.testing.assert_allclose(act(tiny), paper, rtol=1e-12, atol=1e-300)
    assert abs(_softpick_authors(tiny)[2] / paper[2] - 1) > 1e-6  # the cancellation in exp(x) - 1


def test_stablemax_and_taylor_match_public_formulas_on_random_and_extreme_scores(rng):
    stable, taylor = activation("stablemax"), activation("taylor")
    for x in (3 * rng.standard_normal((5, 9)), EXTREME, np.array([[1e150, -1e150, 0.0, 1.0]])):
        np.testing.assert_allclose(stable(x), _stablemax_authors(x), rtol=1e-12, atol=1e-300)
        if np.abs(x).max() < 1e150:  # 1 + s + s^2/2 written out overflows beyond
            h = 1 + x + x**2 / 2  # Based: phi(q) . phi(k) for s = q . k / sqrt(d)
            np.testing.assert_allclose(taylor(x), h / h.sum(-1, keepdims=True), rtol=1e-12, atol=1e-300)
    assert np.all(np.isfinite(taylor(np.array([1e300, -1e300, 3.0]))))


def test_taylor_is_symmetric_about_minus_one_and_not_monotone():
    act = activation("taylor")
    np.testing.assert_allclose(act(np.array([-3.0, 1.0, 0.2])), act(np.array([1.0, -3.0, 0.2]))[[1, 0, 2]])
    w = act(np.array([-3.0, 1.0, -1.0]))
    assert w[0] == pytest.approx(w[1]) and w[2] < w[1]  # h(-1) = 1/2 is the smallest weight, not s -> -inf
    assert act.h(np.array([-1.0]))[0] == pytest.approx(0.5)


def test_stablemax_is_c1_at_zero_and_autograd_agrees_there():
    """ell' = 1 / (1 + |s|) is continuous at 0: analytic, autograd and central differences agree at s = 0."""
    act = activation("stablemax")
    s = np.array([0.0, 0.8, -1.1, 2.0])
    gradcheck(act, {"s": s}, lambda u, s: {"s": act.backward(u, act.forward(s)[1])},
              rtol=RTOL_CENTRAL).assert_ok()


def test_softpick_at_zero_takes_the_left_slope_and_differences_see_the_mean():
    """At s_k = 0, h = 0: the analytic VJP equals autograd's (p_k = 0 kills every term of ds_k); phi_k has
    slopes 0 and 1 / C on the two sides, so central differences see their mean u_k / (2 C)."""
    act = activation("softpick")
    s = np.array([0.0, 0.5, -1.0, 2.0])
    u = np.array([1.0, 0.3, -0.2, 0.1])
    res = gradcheck(act, {"s": s}, lambda u, s: {"s": act.backward(u, act.forward(s)[1])},
                    cotangent=u, rtol=RTOL_AUTOGRAD)
    ag = [c for c in res.comparisons if c.check == "autograd"][0]
    fd = [c for c in res.comparisons if c.check == "central"][0]
    assert ag.ok and not fd.ok and fd.where == (0,)
    C = act.offset + np.abs(np.expm1(s)).sum()
    assert act.backward(u, act.forward(s)[1])[0] == 0
    assert fd.max_abs == pytest.approx(u[0] / (2 * C), rel=1e-4)


@pytest.mark.parametrize("name", NORMALISERS)
def test_facts_are_stated(name):
    act = activation(name)
    assert act.source and "20" in act.source and act.__doc__
    assert act.offset >= 0 and not act.shift_invariant
    assert act.regularity in ("smooth", "kink", "log")
    assert len(act.singular_scores) <= len(act.singular)


def test_fast_routes_keep_the_offset(rng):
    """The fast path's causal strips and streaming attention keep a running normaliser with no term for
    the phantom key: the fast path then takes its dense route (the reference's numbers), streaming refuses."""
    from refattn import fast
    from refattn.core.attention import attention
    from refattn.fast.streaming import streaming_attention
    from refattn.fast.strips import CAUSAL_ROWS

    Q, K, V = (rng.standard_normal((1, CAUSAL_ROWS + 3, 4)) for _ in range(3))
    for name in ("softmax1", "softpick"):
        ref, _ = attention(Q, K, V, activation=name, causal=True)
        out, _ = fast.attention(Q, K, V, activation=name, causal=True)
        np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)
        with pytest.raises(ValueError, match="activation: .*offset"):
            streaming_attention(Q, K, V, activation=name)


def test_refattn_check_lists_every_normaliser_and_its_singular_points():
    from refattn.check import run_check

    rows = {r["name"]: r for r in run_check()["rows"]}
    for name in NORMALISERS:
        assert rows[name]["ok"] and not rows[name]["singular"], rows[name]
        for where, _ in activation(name).singular:
            assert rows[f"{name} @ {where}"]["singular"] and rows[f"{name} @ {where}"]["ok"]
