"""refattn.flex: every activation on softmax-kernel calls (derivations/24-softmax-kernels.md), against the textbook.

Three kernels run the same routes: ``dense`` (the call written with tensor
operations, differentiable anywhere), FlexAttention ``eager`` (PyTorch's
unfused reference) and FlexAttention ``compiled`` (the fused kernel). Each
route's output is compared with :func:`refattn.core.attention.attention`
row by row within the rounding bound of derivation 24 (Eq. 24.E, computed by
:func:`refattn.flex.kernel_error` for the route's own calls, and once more for
the textbook's own rounding); gradients in float64 within ``GRAD_RTOL64`` of
the largest textbook gradient. The inputs of the float64 tests are small
integers with ``beta = 1/2``, so every score is exact in both computations and
the exact zeros test the conventions at the singular points (signexp's jump,
the kinks, expressive's and cosformer's ``h = 0``); the float32 tests use
scores away from 0, where every activation is smooth (tests/test_gpu_parity.py
says why). What PyTorch 2.13 supports (``refattn.flex.SUPPORT``) is tested line
by line: a refusal is a test that PyTorch (or the route) refuses. The compiled
kernel is refused on the CPU; its ``cuda`` cases run where a CUDA device is
(``benchmarks/gpu_check.sh``).
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support import SExp, needs

needs("torch")

import torch  # noqa: E402

import refattn.flex as rf  # noqa: E402
from refattn import ACTIVATIONS  # noqa: E402
from refattn.core import activations as A  # noqa: E402
from refattn.core.attention import attention, attention_backward  # noqa: E402

#: PyTorch warns that the eager kernel materialises the scores: it is chosen here for that (float64, the log-sum-exp)
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

CUDA = torch.cuda.is_available()
ON_CUDA = pytest.mark.skipif(not CUDA, reason="no CUDA device")
U = {torch.float32: 2.0 ** -24, torch.float64: 2.0 ** -53}
B, H, N, D, DV = 2, 2, 7, 4, 3
#: gradients in float64: sums of at most 2N + D products per entry, each entry within (2N + D) u of the sum of
#: its terms' magnitudes; 100 allows for terms up to 100 times the largest gradient (cancellation)
GRAD_RTOL64 = 100 * (2 * 2 * N + D) * U[torch.float64]


def exact_inputs(rng, n_q=N, n_k=N):
    """Integer q, k in [-2, 2] and d = 4 (beta = 1/2): exact scores, zeros among them; a mask with an
    empty row; values and an upstream gradient from N(0, 1)."""
    q = rng.integers(-2, 3, (B, H, n_q, D)).astype(float)
    k = rng.integers(-2, 3, (B, H, n_k, D)).astype(float)
    mask = rng.random((B, 1, n_q, n_k)) < 0.7
    mask[0, 0, 3, :] = False
    return q, k, rng.standard_normal((B, H, n_k, DV)), rng.standard_normal((B, H, n_q, DV)), mask


def smooth_inputs(rng, n=N, d=8):
    """Scores with |s| > 0.3 (coordinate 0 carries +-1.5 in every query and key), from N(0, 1) values."""
    q, k = 0.25 * rng.standard_normal((B, H, n, d)), 0.25 * rng.standard_normal((B, H, n, d))
    q[..., 0], k[..., 0] = 1.5, 1.5 * rng.choice([-1.0, 1.0], size=(B, H, n))
    assert np.min(np.abs(q @ np.swapaxes(k, -1, -2) / math.sqrt(d))) > 0.3
    mask = rng.random((B, 1, n, n)) < 0.7
    mask[..., 0] = True
    return q, k, rng.standard_normal((B, H, n, DV)), rng.standard_normal((B, H, n, DV)), mask


def tensors(*arrays, dtype=torch.float64, device="cpu", grad=False):
    return [None if a is None else torch.tensor(a, dtype=torch.bool if a.dtype == bool else dtype, device=device,
                                                requires_grad=grad and a.dtype != bool) for a in arrays]


# --------------------------------------------------------------------------
# The bound of Eq. 24.E for a route's calls
# --------------------------------------------------------------------------


def _call_parts(pieces, q, k, scale, keep):
    """``t, t', L, P, |q| |k|^T`` of one call, exactly (float64, scores formed)."""
    n_k, copies = k.shape[2], len(pieces)
    kk = torch.cat([k] * copies, dim=2)
    s = (scale * (q @ kk.transpose(-1, -2))).requires_grad_()
    idx = [torch.arange(m).view([m if a == i else 1 for a in range(4)]) for i, m in enumerate(s.shape)]
    t = rf._score_mod(tuple(pieces), n_k)(s, *idx)
    dt, = torch.autograd.grad(t, s, torch.ones_like(t))
    t = t.detach()
    if keep is not None:
        t = torch.where(torch.cat([keep] * copies, dim=-1), t, -math.inf)
    L = torch.logsumexp(t, dim=-1)
    P = torch.where(torch.isfinite(L)[..., None], torch.exp(t - torch.where(torch.isfinite(L), L, 0.0)[..., None]),
                    0.0)
    return t, dt, L, P, q.abs() @ kk.abs().transpose(-1, -2)


def route_bound(q, k, v, activation, u, *, mask=None, causal=False, scale=None):
    """Eq. 24.E for every call of ``activation``'s route, combined as the route combines them: a bound per
    output row, ``(B, H, n_q)``, on the route's rounding error in a dtype of unit roundoff ``u``."""
    q, k, v = (torch.as_tensor(x, dtype=torch.float64) for x in (q, k, v))
    mask = None if mask is None else torch.as_tensor(mask)
    rt, d = rf.route(activation), q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    keep = rf._keep(torch, mask, causal, q.shape[2], k.shape[2], q.device)
    t, dt, L, P, qk = _call_parts(rt.pieces, q, k, scale, keep)
    e_out, e_lse = rf.kernel_error(u, d, scale, qk, t, dt, L, P)
    v_max = v.abs().amax(dim=(-2, -1))[..., None]  # (B, H, 1)
    if rt.normaliser is None:
        return e_out * v_max
    if rt.normaliser == "count":
        lse_h = torch.log(rf._counts(torch, mask, causal, q.shape[2], k.shape[2], q))
        e_h = 2 * u
    else:
        _, _, lse_h, _, _ = parts = _call_parts((rf.Piece(rt.normaliser, 1.0),), q, k, scale, keep)
        e_h = rf.kernel_error(u, d, scale, parts[4], parts[0], parts[1], parts[2], parts[3])[1] + 2 * u
    ok = torch.isfinite(lse_h) & torch.isfinite(L)
    r = torch.where(ok, torch.exp(torch.where(ok, L - lse_h, 0.0)), 0.0)
    return r * v_max * (e_out + e_lse + e_h + u * torch.where(ok, (L - lse_h).abs(), 0.0))


def assert_rows_within(got, want, bound, what):
    """``|got - want| <= bound`` in every column of every row (``bound`` per row); NaN where ``want`` is."""
    got = got.detach().cpu().double().numpy()
    bound = bound.detach().numpy()[..., None]
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{what}: NaN in different places"
    err = np.abs(np.nan_to_num(got) - np.nan_to_num(want))
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (f"{what}: off by {err[worst]:.3e} at {worst}, bound {bound[worst[:-1]][0]:.3e}")
    return float(err.max())


def assert_grads_close(got, want, rtol, what):
    for name, g, w in zip(("q", "k", "v"), got, want):
        g = g.detach().cpu().double().numpy()
        err, scale = np.max(np.abs(g - w)), np.max(np.abs(w))
        assert err <= rtol * scale, f"{what}: d{name} off by {err:.3e}, allowed {rtol:g} x {scale:.3e}"


def textbook(q, k, v, g, activation, mask=None, causal=False, **kw):
    out, cache = attention(q, k, v, activation=activation, mask=mask, causal=causal, **kw)
    return out, attention_backward(g, cache)[:3]


CASES = [pytest.param(None, False, id="unmasked"), pytest.param("mask", True, id="mask-causal"),
         pytest.param("mask", False, id="mask")]


# --------------------------------------------------------------------------
# The routes: pieces, and the dense kernel against the textbook (forward and backward, float64)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_pieces_rebuild_g_and_h(name):
    """Eqs. 24.1, 24.P, 24.U2: sum_c sign_c e^(t_c) = kappa g and sum_c e^(t_c) = kappa h (one kappa for
    every score; h = 1 for a "count" route), against the textbook's g and h."""
    act = A.activation(name)
    tiny = A.sqrt_tiny(np.zeros(1))
    s = np.array([-30, -5, -1, -0.3, -tiny / 2, -1e-200, 0.0, 1e-200, tiny / 2, tiny * 2, 1e-3, 0.3, 1, 5, 30])
    rt = rf.route(name)
    st = torch.tensor(s)
    t = [p.t(st).numpy() for p in rt.pieces]
    e = [np.exp(x) for x in t]
    t_abs = np.max([np.where(np.isfinite(x), np.abs(x), 0.0) for x in t], axis=0)
    num = sum(p.sign * x for p, x in zip(rt.pieces, e))
    den = sum(e)
    g, h = act.g(s), (np.ones_like(s) if rt.normaliser == "count" else act.h(s))
    kappa = 1
    if rt.normaliser is None:  # the call's own normaliser: 2 h for tanhmax's [s, -s] (its log 2 dropped), else h
        kappa = den[np.argmax(h)] / np.max(h)
        assert min(abs(kappa - 1), abs(kappa - 2)) < 1e-14, kappa
        kappa = round(kappa)
    # the pieces' signed sum cancels (TanhMax at s ~ 0: e^s - e^-s): its error is u of the unsigned sum, and
    # an exponential of t carries u |t| (Eq. 24.C)
    allowed = 8 * U[torch.float64] * (1 + t_abs + np.abs(s)) * den
    assert np.all(np.abs(num - kappa * g) <= allowed), (num, kappa * g)
    if rt.normaliser is None:
        assert np.all(np.abs(den - kappa * h) <= allowed), (den, kappa * h)


@pytest.mark.parametrize("masked,causal", CASES)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_dense_route_equals_the_textbook(name, masked, causal, rng):
    q, k, v, g, mask = exact_inputs(rng, n_q=N, n_k=N if causal else N + 2)
    check_dense(name, name, q, k, v, g, mask if masked else None, causal)


def check_dense(route, act, q, k, v, g, mask, causal, what=None):
    """The route on the dense kernel in float64 against the textbook activation ``act``: the output within
    twice Eq. 24.E (the route's rounding and the textbook's), the gradients within GRAD_RTOL64."""
    want, grads = textbook(q, k, v, g, act, mask, causal)
    tq, tk, tv, tmask = tensors(q, k, v, mask, grad=True)
    y = rf.attention(tq, tk, tv, activation=route, mask=tmask, causal=causal, kernel="dense")
    y.backward(torch.tensor(g))
    what = what or str(route)
    assert_rows_within(y, want, 2 * route_bound(q, k, v, route, U[torch.float64], mask=mask, causal=causal), what)
    assert_grads_close((tq.grad, tk.grad, tv.grad), grads, GRAD_RTOL64, what)


#: a user's formula (as torch functions) and the textbook activation it equals
FORMULAS = {
    "rho=1": (lambda: rf.formula(ell=torch.nn.functional.logsigmoid), A.Sigmoid()),
    "bounded": (lambda: rf.formula(ell=lambda s: s.abs() + torch.log1p(torch.exp(-2 * s.abs())) - math.log(2),
                                   rho=torch.tanh, bounded=True), A.TanhMax()),
    "unbounded, h = 1": (lambda: rf.formula(rho=lambda s: s), A.Linear()),
    "unbounded": (lambda: rf.formula(ell=lambda s: s, rho=lambda s: s), SExp()),
    "bounded rho, unbounded route": (lambda: rf.formula(ell=lambda s: s.abs(), rho=torch.sign), A.SignExp()),
}


@pytest.mark.parametrize("case", FORMULAS)
def test_a_users_formula_equals_the_textbook(case, rng):
    make, act = FORMULAS[case]
    rt = make()
    q, k, v, g, mask = exact_inputs(rng)
    if case == "bounded rho, unbounded route":  # sign's jump: scores away from 0 (the route's slope is 0 there,
        q, k, v, g, mask = smooth_inputs(rng)   # but asinh(sign(s)/2) jumps, and so does its gradient)
    for m, causal in ((None, False), (mask, True)):
        check_dense(rt, act, q, k, v, g, m, causal, case)


def test_a_learnable_temperature_in_ell(rng):
    """ell = s / tau with tau a tensor that requires grad: the value is softmax with beta / tau (the textbook),
    and the gradient of tau and of q, k, v pass torch.autograd.gradcheck (central differences, float64)."""
    q, k, v, g, _ = exact_inputs(rng)
    tau = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    rt = rf.formula(ell=lambda s: s / tau)
    tq, tk, tv = tensors(q, k, v, grad=True)
    want, _ = attention(q, k, v, activation="softmax", score_options={"beta": 0.5 / 0.7})
    y = rf.attention(tq, tk, tv, activation=rt, kernel="dense")
    assert_rows_within(y, want, 2 * route_bound(q, k, v, rt, U[torch.float64]) + 1e-15, "temperature")
    assert torch.autograd.gradcheck(lambda *x: rf.attention(*x, activation=rt, kernel="dense"), (tq, tk, tv))
    assert torch.autograd.gradcheck(lambda t: rf.attention(tq, tk, tv, activation=rf.formula(ell=lambda s: s / t),
                                                           kernel="dense"), (tau,))


def test_dot_score_and_unequal_lengths(rng):
    q, k, v, g, _ = exact_inputs(rng, n_q=5, n_k=9)
    want, grads = textbook(q, k, v, g, "tanhmax", score="dot")
    tq, tk, tv = tensors(q, k, v, grad=True)
    y = rf.attention(tq, tk, tv, activation="tanhmax", score="dot", kernel="dense")
    y.backward(torch.tensor(g))
    assert_rows_within(y, want, 2 * route_bound(q, k, v, "tanhmax", U[torch.float64], scale=1.0), "dot")
    assert_grads_close((tq.grad, tk.grad, tv.grad), grads, GRAD_RTOL64, "dot")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_a_value_that_is_not_finite_reaches_the_output_as_in_the_textbook(where, causal, rng):
    q, k, v, _, mask = exact_inputs(rng)
    arrays = {"q": q, "k": k, "v": v}
    arrays[where][1, 0, 4, 2] = np.nan if where != "k" else np.inf
    for m in (None, mask):
        with np.errstate(invalid="ignore"):  # NumPy says it meets a NaN; so it should
            want, _ = attention(q, k, v, activation="signexp", mask=m, causal=causal)
        y = rf.attention(*tensors(q, k, v), activation="signexp", mask=tensors(m)[0], causal=causal, kernel="dense")
        assert np.array_equal(np.isnan(y.numpy()), np.isnan(want)), (where, m is None)
        assert np.isnan(want).any()


def test_arguments_are_refused_in_one_line_before_any_work(rng):
    q, k, v, _, mask = exact_inputs(rng)
    tq, tk, tv, tmask = tensors(q, k, v, mask)
    bad = [
        (dict(kernel="fast"), ValueError, "kernel: expected one of"),
        (dict(q=tq[0]), ValueError, "q: expected a 4-D tensor"),
        (dict(q=tq.half()), TypeError, "q: expected float32 or float64"),
        (dict(k=tk.float()), TypeError, "k: torch.float32 on cpu, but q is torch.float64"),
        (dict(v=tv[:, :, :3]), ValueError, "v: shapes"),
        (dict(mask=tmask.int()), TypeError, "mask: expected a bool tensor"),
        (dict(mask=tmask[..., :3]), ValueError, "mask: shape"),
        (dict(score="additive"), ValueError, "score: the softmax kernel forms beta q.k itself"),
        (dict(activation="nope"), ValueError, "name: unknown activation"),
        (dict(activation=SExp()), TypeError, "activation: no softmax-kernel route"),
        (dict(causal=1), TypeError, "causal: expected True or False"),
        (dict(k=tk[:, :, :5], v=tv[:, :, :5], causal=True), ValueError, "causal: needs as many queries as keys"),
    ]
    for change, error, message in bad:
        args = {"q": tq, "k": tk, "v": tv, "mask": None, "kernel": "dense", **change}
        with pytest.raises(error, match=message) as info:
            rf.attention(args.pop("q"), args.pop("k"), args.pop("v"), **args)
        assert "\n" not in str(info.value)
    with pytest.raises(TypeError, match="rho: expected a function"):
        rf.formula(rho=2.0)


# --------------------------------------------------------------------------
# What PyTorch 2.13 supports on the CPU (refattn.flex.SUPPORT), each claim a test
# --------------------------------------------------------------------------


def _flex():
    from torch.nn.attention.flex_attention import flex_attention
    return flex_attention


def test_cpu_flex_attention_has_no_backward_even_under_no_grad(rng):
    """SUPPORT[cpu, *]: PyTorch refuses inputs that require grad (also under no_grad); the route says so
    first, in one line, and under no_grad runs on detached inputs."""
    q, k, v, _, _ = exact_inputs(rng)
    tq, tk, tv = tensors(q, k, v, grad=True)
    with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
        _flex()(tq, tk, tv)
    with torch.no_grad(), pytest.raises(NotImplementedError, match="does not support backward on CPU"):
        _flex()(tq, tk, tv)
    for kernel in ("eager", None):
        with pytest.raises(NotImplementedError, match="kernel: PyTorch's FlexAttention has no backward on the CPU"):
            rf.attention(tq, tk, tv, kernel=kernel)


def test_the_compiled_kernel_is_refused_on_the_cpu_and_the_default_there_is_eager(rng):
    """SUPPORT[cpu, compiled]: refused in one line, before any work (with a mask PyTorch 2.13's compiled CPU
    kernel returned wrong rows, varying from run to run); the default kernel on the CPU is the eager one."""
    q, k, v, _, mask = exact_inputs(rng)
    tq, tk, tv, tmask = tensors(q, k, v, mask)
    with pytest.raises(NotImplementedError, match=r"^kernel: PyTorch's compiled FlexAttention on the CPU returned "
                                                  r"wrong rows for masked calls") as info:
        rf.attention(tq, tk, tv, mask=tmask, kernel="compiled")
    assert len(str(info.value).splitlines()) == 1
    with torch.no_grad():
        default = rf.attention(tq, tk, tv, activation="tanhmax", mask=tmask)
        eager = rf.attention(tq, tk, tv, activation="tanhmax", mask=tmask, kernel="eager")
    assert torch.equal(default, eager)


def test_the_eager_kernel_equals_the_textbook_in_float64(rng):
    """SUPPORT[cpu, eager]: float64, with the log-sum-exp; one pair route with a mask, causal (the quick tier's
    representative; every activation: the slow tier)."""
    q, k, v, g, mask = exact_inputs(rng)
    want, _ = attention(q, k, v, activation="signexp", mask=mask, causal=True)
    tq, tk, tv, tmask = tensors(q, k, v, mask, grad=True)
    with torch.no_grad():
        y = rf.attention(tq, tk, tv, activation="signexp", mask=tmask, causal=True, kernel="eager")
    bound = 2 * route_bound(q, k, v, "signexp", U[torch.float64], mask=mask, causal=True)
    assert_rows_within(y, want, bound, "signexp, eager")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ACTIVATIONS) + list(FORMULAS))
def test_every_route_on_the_eager_kernel_in_float64(name, rng):
    """SUPPORT[cpu, eager]: every built-in and every user's formula, forward, float64."""
    rt = FORMULAS[name][0]() if name in FORMULAS else name
    act = FORMULAS[name][1] if name in FORMULAS else name
    q, k, v, g, mask = smooth_inputs(rng) if name == "bounded rho, unbounded route" else exact_inputs(rng)
    for m, causal in ((None, False), (mask, True)):
        want, _ = attention(q, k, v, activation=act, mask=m, causal=causal)
        y = rf.attention(*tensors(q, k, v), activation=rt, mask=tensors(m)[0], causal=causal, kernel="eager")
        assert_rows_within(y, want, 2 * route_bound(q, k, v, rt, U[torch.float64], mask=m, causal=causal), name)


@pytest.mark.slow
def test_the_eager_kernels_log_sum_exp_and_a_captured_tensor_that_requires_grad(rng):
    """SUPPORT[cpu, eager]: the log-sum-exp equals the dense call's; a captured tensor that requires grad runs
    forward (its backward failed in PyTorch 2.13), which the route refuses after the forward, in one line."""
    from torch.nn.attention.flex_attention import AuxRequest
    q, k, v, _, _ = exact_inputs(rng)
    tq, tk, tv = tensors(q, k, v)
    out, aux = _flex()(tq, tk, tv, score_mod=lambda s, b, h, i, j: s.abs(), return_aux=AuxRequest(lse=True))
    want = torch.logsumexp(0.5 * (tq @ tk.transpose(-1, -2)).abs(), -1)
    assert torch.allclose(aux.lse, want, rtol=1e-14, atol=0)
    tau = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    out = _flex()(tq, tk, tv, score_mod=lambda s, b, h, i, j: s / tau)
    assert out.requires_grad  # (its backward failed in PyTorch 2.13 and may not in later versions)
    with pytest.raises(NotImplementedError, match="a tensor its functions capture requires grad"):
        rf.attention(tq, tk, tv, activation=rf.formula(ell=lambda s: s / tau), kernel="eager")


# --------------------------------------------------------------------------
# On a CUDA device (benchmarks/gpu_check.sh): the fused kernel, forward and backward
# --------------------------------------------------------------------------


@ON_CUDA
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", list(ACTIVATIONS) + list(FORMULAS))
def test_cuda_compiled_route_forward_and_backward(name, dtype, rng):
    """SUPPORT[cuda, compiled]: every route, output within Eq. 24.E, gradients (through the log-sum-exp where
    the route uses it) within GRAD_RTOL64 in float64; in float32 within 4 times the dense route's own float32
    error (against float64) plus 1e-5 of the largest gradient, as tests/test_gpu_parity.py allows."""
    rt = FORMULAS[name][0]() if name in FORMULAS else name
    act = FORMULAS[name][1] if name in FORMULAS else name
    q, k, v, g, mask = smooth_inputs(rng, n=24)
    for m, causal in ((None, False), (mask, True)):
        want, grads = textbook(q, k, v, g, act, m, causal)
        tq, tk, tv, tmask = tensors(q, k, v, m, dtype=dtype, device="cuda", grad=True)
        y = rf.attention(tq, tk, tv, activation=rt, mask=tmask, causal=causal, kernel="compiled")
        y.backward(torch.tensor(g, dtype=dtype, device="cuda"))
        bound = route_bound(q, k, v, rt, U[dtype], mask=m, causal=causal) \
            + route_bound(q, k, v, rt, U[torch.float64], mask=m, causal=causal)
        assert_rows_within(y, want, bound.to(torch.float64) * (2 if dtype == torch.float64 else 1), name)
        if dtype == torch.float64:
            assert_grads_close((tq.grad, tk.grad, tv.grad), grads, GRAD_RTOL64, name)
            continue
        dq, dk, dv, dm = tensors(q, k, v, m, dtype=torch.float32, grad=True)
        rf.attention(dq, dk, dv, activation=rt, mask=dm, causal=causal, kernel="dense").backward(
            torch.tensor(g, dtype=torch.float32))
        for label, got, dense, w in zip("qkv", (tq.grad, tk.grad, tv.grad), (dq.grad, dk.grad, dv.grad), grads):
            allowed = 4 * np.abs(dense.double().numpy() - w).max() + 1e-5 * np.abs(w).max()
            err = np.abs(got.cpu().double().numpy() - w).max()
            assert err <= allowed, f"{name}: d{label} off by {err:.3e}, allowed {allowed:.3e}"


@ON_CUDA
def test_cuda_gradients_of_a_captured_parameter_and_of_the_log_sum_exp(rng):
    """SUPPORT[cuda, compiled]: a temperature captured in ell gets the dense route's gradient; the log-sum-exp's
    gradient (AuxRequest(lse=True)) is that of torch.logsumexp of the modified scores; float64 runs."""
    from torch.nn.attention.flex_attention import AuxRequest
    q, k, v, g, _ = smooth_inputs(rng, n=24)
    grads = []
    for kernel, device in (("compiled", "cuda"), ("dense", "cpu")):
        tau = torch.tensor(0.7, dtype=torch.float64, device=device, requires_grad=True)
        tq, tk, tv = tensors(q, k, v, device=device, grad=True)
        rf.attention(tq, tk, tv, activation=rf.formula(ell=lambda s: s / tau), kernel=kernel).backward(
            torch.tensor(g, device=device))
        grads.append(float(tau.grad))
    assert abs(grads[0] - grads[1]) <= GRAD_RTOL64 * abs(grads[1])
    tq, tk, tv = tensors(q, k, v, device="cuda", grad=True)
    flex = torch.compile(_flex(), dynamic=False)
    out, aux = flex(tq, tk, tv, score_mod=lambda s, b, h, i, j: s.abs(), return_aux=AuxRequest(lse=True))
    w = torch.randn_like(aux.lse)
    (aux.lse * w).sum().backward()
    sq, sk = tensors(q, k, device="cuda", grad=True)
    (torch.logsumexp((sq @ sk.transpose(-1, -2) / math.sqrt(q.shape[-1])).abs(), -1) * w).sum().backward()
    for got, want in ((tq.grad, sq.grad), (tk.grad, sk.grad)):
        assert float((got - want).abs().max()) <= GRAD_RTOL64 * float(want.abs().max())


# --------------------------------------------------------------------------
# benchmarks/bench_flex.py: it runs, compares before it times, and says what did not run
# --------------------------------------------------------------------------

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_flex.py"


@pytest.mark.slow
def test_the_benchmark_checks_every_candidate_and_records_the_machine(tmp_path):
    """At smoke size on the CPU: both modes, the machine and versions in the JSON, and every candidate
    compared with refattn.torch before it is timed (within 1e-4: that the benchmark compares the same
    quantities; the routes' rounding bounds are the tests above); asserts nothing about time."""
    out = tmp_path / "flex.json"
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--dtypes", "float32", "--activations",
                           "softmax", "linear", "--out", str(out)], cwd=BENCH.parents[1], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["complete"] and res["device"] == "cpu" and res["kernel"] == "dense"
    assert res["machine"]["torch"]["version"] == torch.__version__ and res["machine"]["numpy"] == np.__version__
    assert {(r["activation"], r["mode"]) for r in res["rows"]} == {
        (a, m) for a in ("softmax", "linear") for m in ("forward + backward", "forward")}
    for r in res["rows"]:
        assert set(r["max_rel"]) == {"flex", "streaming"} and max(r["max_rel"].values()) < 1e-4, r
        assert r["flex_over_sdpa"]["ratio"] > 0 and not r["not_run"]
    assert "| linear | float32 | 32 | forward |" in done.stdout


@pytest.mark.slow
def test_the_benchmark_records_what_the_cpu_kernels_do_not_run(tmp_path):
    """SUPPORT[cpu, *]: the compiled kernel refused, the eager one's missing backward, each recorded with the
    reason instead of a time."""
    spec = importlib.util.spec_from_file_location("bench_flex", BENCH)
    bench = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCH.parent))  # it imports machine.py beside it
    try:
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(BENCH.parent))
    args = bench.machine.parser("x").parse_args([])
    args.device, args.kernel, args.passes, args.repeats, args.pause, args.warmup = "cpu", "compiled", 1, 1, 0.0, 0.0
    row = bench.time_row(torch, "linear", "float32", 16, "forward", args)
    assert row["not_run"]["flex"].startswith("NotImplementedError: kernel: PyTorch's compiled FlexAttention on the CPU")
    args.kernel = "eager"
    row = bench.time_row(torch, "softmax", "float32", 16, "forward + backward", args)
    assert row["not_run"]["flex"].startswith("NotImplementedError: kernel: PyTorch's FlexAttention has no backward")
