"""The fast path's kernel for an activation given as g and h (``refattn.fast.kernels.PaperForm``).

It computes ``p = h / sum h`` and ``phi = g / sum h`` from one call of each
user function, and the VJP factors ``A = g' p / h``, ``B = h' p / h`` from one
call of each derivative (derivation 01, Eq. 01.R5); the reference computes
``rho softmax(log h)`` and ``rho', ell'`` term by term. The two agree to
rounding: the direct quotient and the log-sum-exp route differ by a few units
of ``|ell|`` in the last place of ``p`` (the logarithm's and exponential's
rounding), so the tolerance is ``64 u (1 + max|ell|)`` relative, ``u`` the
unit roundoff. Where the direct route cannot be exact (an ``h`` that
overflows, a row whose ``h`` is 0, ``h = 0`` at an entry) it falls back to
the reference's own checked route: the same error, or inside training the
same NaN row.
"""

from __future__ import annotations

import autograd.numpy as anp
import numpy as np
import pytest

from refattn import fast
from refattn.core import attention as reference
from refattn.custom import NonFiniteError, define_activation, divergence_as_data
from refattn.fast.kernels import Generic, PaperForm, forward as kernel_forward, kernel, vjp_from
from refattn.fast.streaming import streaming_attention, streaming_attention_backward


def _relu(s):
    return anp.maximum(s, 0.0)


#: Activations of a researcher's, as g and h: signed with a growing normaliser; g = h (rho = 1); an h with
#: zeros (relu, so g = 0 where h = 0); a constant h given as a scalar.
ACTS = {
    "soft_sign": define_activation("soft_sign", lambda s: s / (1.0 + anp.abs(s)), lambda s: 1.0 + anp.abs(s),
                                   lambda s: 1.0 / (1.0 + anp.abs(s)) ** 2, anp.sign, singular_scores=[0.0]),
    "softplus": (lambda f: define_activation("softplus", f, f))(lambda s: anp.logaddexp(0.0, s)),
    "relu_norm": define_activation("relu_norm", lambda s: _relu(s) ** 2, lambda s: _relu(s) ** 2),
    "over_count": define_activation("over_count", lambda s: anp.tanh(s), lambda s: 1.0),
}


def _tolerance(act, s, dtype):
    with np.errstate(all="ignore"):
        ell = np.where(np.isfinite(act.ell(s.astype(np.float64))), np.abs(act.ell(s.astype(np.float64))), 0.0)
    return 64 * np.finfo(dtype).eps * (1.0 + float(ell.max()))


def _close(got, want, tol):
    scale = max(float(np.max(np.abs(want))), 1e-300)
    err = float(np.max(np.abs(np.asarray(got, np.float64) - want))) / scale
    assert err <= tol, f"relative error {err:.3e} > {tol:.3e}"


@pytest.mark.parametrize("name", sorted(ACTS))
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_paper_form_equals_the_reference(name, masked, dtype, rng):
    act = ACTS[name]
    assert type(kernel(act)) is PaperForm
    s = (2.0 * rng.standard_normal((3, 5, 7))).astype(dtype)
    mask = rng.random((3, 5, 7)) < 0.7 if masked else None
    u = rng.standard_normal(s.shape).astype(dtype)
    p, w, aux = kernel_forward(act, s, -1, mask)
    want_w, cache = act.forward(s, -1, mask)
    tol = _tolerance(act, s, dtype)
    assert w.dtype == dtype and p.dtype == dtype
    _close(w, want_w, tol)
    _close(p, act.p(s, -1, mask), tol)
    _close(vjp_from(act, np, aux, p, u.copy(), -1, w), act.backward(u, cache), tol)


def test_paper_form_keeps_the_conventions_of_the_reference(rng):
    act = ACTS["relu_norm"]
    s = np.array([[-1.0, -2.0, -0.5], [0.0, 1.0, -3.0]])  # row 0: h = 0 everywhere, no normaliser
    p, w, aux = kernel_forward(act, s)
    assert np.all(w[0] == 0) and np.all(p[0] == 0) and w[1, 2] == 0 and np.isclose(w[1].sum(), 1.0)
    u = rng.standard_normal(s.shape)
    ds = vjp_from(act, np, aux, p, u.copy(), -1, w)
    np.testing.assert_allclose(ds, act.backward(u, act.forward(s)[1]), rtol=1e-14, atol=1e-300)
    assert np.all(ds[0] == 0) and ds[1, 2] == 0


def test_attention_blocked_causal_and_streaming_agree_with_the_reference(rng):
    act = ACTS["soft_sign"]
    Q, K, V, G = (rng.standard_normal((2, 2, 48, 4)) for _ in range(4))
    want, ref_cache = reference.attention(Q, K, V, activation=act, causal=True)
    want_g = reference.attention_backward(G, ref_cache)
    for out, grads in ((lambda o, c: (o, fast.attention_backward(G, c)))(*fast.attention(Q, K, V, activation=act,
                                                                                           causal=True)),
                       (lambda o, c: (o, streaming_attention_backward(G, c)))(
                           *streaming_attention(Q, K, V, activation=act, causal=True, block_size=16))):
        np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-14)
        for a, b in zip(grads[:3], want_g[:3]):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


def test_an_overflow_takes_the_checked_route(rng):
    """An h that overflows: strict, the activation's own error naming the score; in training, a NaN row."""
    naive = define_activation("naive_exp", anp.exp, anp.exp)
    s = np.array([[0.0, 800.0, 1.0], [0.5, -0.5, 1.0]])
    with pytest.raises(NonFiniteError, match=r"'naive_exp': ell = log h is \+inf .* at s = 800.0"):
        kernel_forward(naive, s)
    p, w, aux = kernel_forward(divergence_as_data(naive), s)
    assert np.all(np.isnan(w[0])) and np.all(np.isfinite(w[1]))
    np.testing.assert_allclose(w[1], np.exp(s[1]) / np.exp(s[1]).sum(), rtol=1e-14)


def test_a_subclass_of_activation_still_runs_through_the_reference():
    from refattn.core.activations import TanhMax  # noqa: PLC0415

    class MyTanhMax(TanhMax):
        name = "my_tanhmax"

    assert type(kernel(MyTanhMax())) is Generic
