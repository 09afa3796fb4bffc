"""refattn.torch: core's forward and hand-derived backward in a torch.autograd.Function.

Every activation and score equals the NumPy reference (forward and gradient)
to 1e-12 in float64, masked, causal and with scores near +-1000; the
gradient comes from core's backward (the Function's), and
``torch.autograd.gradcheck`` agrees with it away from the kinks; float32
within its rounding; an activation from ``define_activation`` works; PyTorch's
own autograd through core's forward (which the array API lets it trace) is a
third, independent check of the hand-derived VJP. CUDA where a GPU is
present. Tolerances: ``framework_cases``.
"""

import importlib

import numpy as np
import pytest

from tests.core.framework_cases import (ACTIVATIONS, EXTREME, SCORES, assert_close, attention_inputs, mask_with_empty_row,
                             masked_score_case, reference_activation, reference_attention, scores)
from tests.support import needs

needs("torch")
import torch  # noqa: E402
rt = importlib.import_module("refattn.torch")

from refattn import activation, define_activation  # noqa: E402
from refattn.check import away_from_singular  # noqa: E402
from refattn.core.backend import array_module  # noqa: E402
from refattn.core.activations import Activation  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _t(x, grad=False, device="cpu"):
    return None if x is None else torch.tensor(x, requires_grad=grad, device=device)


def _np(x):
    return x.detach().cpu().numpy()


def _weights_and_grad(name, s, u, dim=-1, mask=None, device="cpu"):
    st = _t(s, grad=True, device=device)
    w = rt.activation(name)(st, dim=dim, mask=_t(mask, device=device))
    w.backward(_t(u, device=device))
    return w, st.grad


# --- every activation, float64, to 1e-12 --------------------------------------------------------------
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_equals_numpy_masked_and_extreme(name, rng):
    s = scores(name, (3, 4, 6), rng)
    u, mask = rng.standard_normal(s.shape), mask_with_empty_row(s.shape, rng)
    for m in (None, mask):
        want_w, want_g = reference_activation(name, s, u, mask=m)
        w, g = _weights_and_grad(name, s, u, mask=m)
        assert_close(_np(w), want_w, f"{name} weights, mask={m is not None}")
        assert_close(_np(g), want_g, f"{name} gradient, mask={m is not None}")
        assert np.all(np.isfinite(_np(w))) and np.all(np.isfinite(_np(g))), "scores near +-1000 must stay finite"


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_along_another_axis(name, rng):
    s = scores(name, (4, 5, 3), rng, extreme=False)
    u = rng.standard_normal(s.shape)
    want_w, want_g = reference_activation(name, s, u, axis=1)
    w, g = _weights_and_grad(name, s, u, dim=1)
    assert_close(_np(w), want_w, f"{name} weights, dim=1")
    assert_close(_np(g), want_g, f"{name} gradient, dim=1")


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_scores_near_a_thousand_stay_finite_as_in_the_reference(name):
    s = np.array([list(EXTREME), [1000.0, 0.5, -0.25, 2.0]])
    u = np.array([[0.3, -1.2, 0.7, 0.1], [1.0, -0.5, 0.25, -2.0]])
    want_w, want_g = reference_activation(name, s, u)
    w, g = _weights_and_grad(name, s, u)
    assert np.all(np.isfinite(want_w)) and np.all(np.isfinite(want_g))
    assert_close(_np(w), want_w, f"{name} weights at +-1000")
    assert_close(_np(g), want_g, f"{name} gradient at +-1000")


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_float32_within_its_rounding(name, rng):
    s64 = scores(name, (3, 4, 6), rng, extreme=False)
    u64, mask = rng.standard_normal(s64.shape), mask_with_empty_row(s64.shape, rng)
    s, u = s64.astype(np.float32), u64.astype(np.float32)
    want_w, want_g = reference_activation(name, s, u, mask=mask)
    w64, g64 = reference_activation(name, s.astype(np.float64), u.astype(np.float64), mask=mask)
    w, g = _weights_and_grad(name, s, u, mask=mask)
    assert w.dtype == torch.float32 and g.dtype == torch.float32
    assert_close(_np(w), want_w, f"{name} weights float32", w64)
    assert_close(_np(g), want_g, f"{name} gradient float32", g64)


# --- the gradient is core's backward -------------------------------------------------------------------
def test_the_gradient_is_the_functions_backward_which_is_cores(rng, monkeypatch):
    s = _t(rng.standard_normal((2, 5)), grad=True)
    u = _t(rng.standard_normal((2, 5)))
    w = rt.activation("tanhmax")(s)
    assert type(w.grad_fn).__name__ == "CoreFunctionBackward"
    (honest,) = torch.autograd.grad(w, s, u)
    core = Activation.backward
    monkeypatch.setattr(Activation, "backward", lambda self, g, cache: 2.0 * core(self, g, cache))
    (doubled,) = torch.autograd.grad(rt.activation("tanhmax")(s), s, u)
    assert torch.allclose(doubled, 2.0 * honest, rtol=0, atol=0)


# --- second derivatives: PyTorch differentiates core's VJP, exactly ----------------------------------------
def _plain(act):
    """``phi`` as PyTorch's autograd sees it: core's forward on tensors, traced (no hand-derived backward)."""
    return lambda x: act.forward(x, -1, None)[0]


SECOND_ORDER = ("softmax", "tanhmax", "expressive", "rectified")


def _second_order_case(name, rng):
    act = RECTIFIED if name == "rectified" else activation(name)
    s = _t(away_from_singular(act, 2.0 * rng.standard_normal((2, 5))))
    return act, s, _t(rng.standard_normal((2, 5)))


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_the_hessian_equals_plain_autograds(name, rng):
    """``torch.autograd.functional.hessian`` and ``jacrev(jacrev(.))`` through the Function equal PyTorch's own
    second derivative of core's forward in float64 (never a zero or detached one)."""
    act, s, u = _second_order_case(name, rng)
    phi = rt.activation(act)
    want = torch.autograd.functional.hessian(lambda x: (_plain(act)(x) * u).sum(), s)
    assert want.abs().max() > 0.01  # a real second derivative to compare with
    got = torch.autograd.functional.hessian(lambda x: (phi(x) * u).sum(), s)
    assert_close(_np(got), _np(want), f"{name}: Hessian")
    got = torch.func.jacrev(torch.func.jacrev(lambda x: (phi(x) * u).sum()))(s)
    assert_close(_np(got), _np(want), f"{name}: jacrev of jacrev")
    if name == "rectified":  # and the formula written directly, g(s) / sum_k h(s_k)
        xp = array_module(s)
        direct = torch.autograd.functional.hessian(
            lambda x: (_rectified_g(x, xp) / _rectified_h(x, xp).sum(-1, keepdim=True) * u).sum(), s)
        assert_close(_np(got), _np(direct), "rectified: Hessian against the formula written directly")


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_create_graph_and_gradgradcheck(name, rng):
    act, s, u = _second_order_case(name, rng)
    s.requires_grad_(True)
    phi = rt.activation(act)
    (g,) = torch.autograd.grad((phi(s) * u).sum(), s, create_graph=True)
    assert g.requires_grad  # a gradient with its graph, to be differentiated in turn
    (gg,) = torch.autograd.grad((g * u).sum(), s)
    (want,) = torch.autograd.grad((torch.autograd.grad((_plain(act)(s) * u).sum(), s, create_graph=True)[0] * u)
                                  .sum(), s)
    assert_close(_np(gg), _np(want), f"{name}: gradient of the gradient")
    assert torch.autograd.gradgradcheck(phi, (s,), eps=1e-6, atol=1e-5, rtol=1e-3)


def test_attention_gradgradcheck_with_neural_parameters(rng):
    q, k, v, params = attention_inputs("neural", rng, shape=(1, 3, 2))
    names = tuple(params)
    inputs = tuple(_t(x, grad=True) for x in (q, k, v, *params.values()))

    def f(q, k, v, *p):
        return rt.attention(q, k, v, score="neural", activation="tanhmax", causal=True, params=dict(zip(names, p)))

    assert torch.autograd.gradgradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-3)


# --- torch.func ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ("tanhmax", "rectified"))
def test_torch_func_grad_vmap_and_jacrev(name, rng):
    act, s, u = _second_order_case(name, rng)
    phi, plain = rt.activation(act), _plain(act)
    rows = torch.func.vmap(torch.func.grad(lambda x: (phi(x) * u[0]).sum()))(s)
    for i in range(2):
        x = s[i].clone().requires_grad_(True)
        (want,) = torch.autograd.grad((plain(x) * u[0]).sum(), x)
        assert_close(_np(rows[i]), _np(want), f"{name}: vmap(grad) row {i}")
    assert_close(_np(torch.func.jacrev(phi)(s)), _np(torch.autograd.functional.jacobian(plain, s)),
                 f"{name}: jacrev")
    assert_close(_np(torch.func.vmap(phi)(s)), _np(phi(s)), f"{name}: vmap")


def test_forward_mode_is_refused_in_one_line_naming_reverse_mode(rng):
    s = _t(rng.standard_normal((2, 5)))
    for transform in (torch.func.jacfwd, torch.func.hessian):
        with pytest.raises(RuntimeError, match="^refattn.torch: forward-mode .*use reverse mode"):
            transform(rt.activation("softmax"))(s)
    with pytest.raises(RuntimeError, match="^refattn.torch: forward-mode"):
        torch.func.jvp(rt.activation(RECTIFIED), (s,), (s,))


# --- float16 and bfloat16: computed in float32, rounded back ---------------------------------------------
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
@pytest.mark.parametrize("name", ("softmax", "tanhmax", "rectified"))
def test_half_precisions_are_float32_rounded_once(name, dtype, rng):
    """The weights and gradient in ``dtype`` are the float32 ones rounded to ``dtype`` (so within half a unit
    in the last place, ``2**-p`` relative, of them, plus the smallest subnormal); the float32 ones are
    within float32 rounding of the float64 reference (``test_float32_within_its_rounding``)."""
    act = RECTIFIED if name == "rectified" else activation(name)
    s64 = away_from_singular(act, 2.0 * rng.standard_normal((3, 6)))
    s = torch.tensor(s64, dtype=dtype, requires_grad=True)
    s32 = s.detach().float().requires_grad_(True)
    u = torch.tensor(rng.standard_normal((3, 6)), dtype=dtype)
    phi = rt.activation(act)
    w, w32 = phi(s), phi(s32)
    (g,), (g32,) = torch.autograd.grad(w, s, u), torch.autograd.grad(w32, s32, u.float())
    assert w.dtype == g.dtype == dtype
    info = torch.finfo(dtype)
    for got, wide, what in ((w, w32, "weights"), (g, g32, "gradient")):
        assert torch.equal(got, wide.to(dtype)), f"{name} {dtype} {what}: not the float32 result rounded once"
        bound = info.eps / 2 * wide.abs() + info.smallest_normal * info.eps
        assert torch.all((got.float() - wide).abs() <= bound), f"{name} {dtype} {what}: beyond half an ulp"


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_torch_autograd_through_cores_forward_agrees(name, rng):
    """PyTorch's autograd differentiates core's forward itself (a third check beside autograd and central
    differences): it equals the hand-derived VJP to rounding."""
    act = activation(name)
    s = _t(scores(name, (3, 6), rng, extreme=False), grad=True)
    u, mask = _t(rng.standard_normal((3, 6))), _t(mask_with_empty_row((3, 6), rng))
    w, cache = act.forward(s, -1, mask)  # core on tensors, traced by PyTorch's autograd
    (traced,) = torch.autograd.grad(w, s, u)
    assert_close(_np(act.backward(u, cache)), _np(traced), f"{name}: hand-derived VJP against torch autograd")


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_gradcheck_away_from_the_kinks(name, rng):
    s = _t(scores(name, (2, 5), rng, extreme=False), grad=True)
    mask = _t(np.array([[True, True, False, True, True], [True, False, True, True, True]]))
    phi = rt.activation(name)
    assert torch.autograd.gradcheck(lambda x: phi(x, mask=mask), (s,), eps=1e-6, atol=1e-5, rtol=1e-3)


# --- attention: causal for every activation, every score ------------------------------------------------
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_causal_attention_equals_numpy(name, rng):
    q, k, v, _ = attention_inputs("scaled_dot", rng)
    g = rng.standard_normal(q.shape[:-1] + v.shape[-1:])
    want, (dq, dk, dv, _) = reference_attention(q, k, v, {}, g, activation=name, causal=True)
    qt, kt, vt = (_t(x, grad=True) for x in (q, k, v))
    out = rt.attention(qt, kt, vt, activation=name, causal=True)
    out.backward(_t(g))
    assert_close(_np(out), want, f"{name} causal output")
    for got, ref, what in ((qt.grad, dq, "dq"), (kt.grad, dk, "dk"), (vt.grad, dv, "dv")):
        assert_close(_np(got), ref, f"{name} causal {what}")


@pytest.mark.parametrize("score_name", SCORES)
def test_every_score_with_its_parameters_and_a_mask(score_name, rng):
    q, k, v, params, mask, g, want, (dq, dk, dv, dp) = masked_score_case(score_name, rng)
    qt, kt, vt = (_t(x, grad=True) for x in (q, k, v))
    pt = {n: _t(p, grad=True) for n, p in params.items()}
    out = rt.attention(qt, kt, vt, score=score_name, activation="tanhmax", mask=_t(mask), params=pt)
    out.backward(_t(g))
    assert_close(_np(out), want, f"{score_name} output")
    assert (qt is None) == (dq is None)
    for got, ref, what in ((qt, dq, "dq"), (kt, dk, "dk"), (vt, dv, "dv")):
        if ref is not None:
            assert_close(_np(got.grad), ref, f"{score_name} {what}")
    for n in params:
        assert_close(_np(pt[n].grad), dp[n], f"{score_name} d{n}")


def test_attention_gradcheck_with_neural_parameters(rng):
    q, k, v, params = attention_inputs("neural", rng, shape=(1, 4, 3))
    names = tuple(params)
    inputs = tuple(_t(x, grad=True) for x in (q, k, v, *params.values()))

    def f(q, k, v, *p):
        return rt.attention(q, k, v, score="neural", activation="expressive", causal=True,
                            params=dict(zip(names, p)))

    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-3)


# --- define_activation in PyTorch ----------------------------------------------------------------------
def _rectified_g(s, xp):
    return xp.maximum(xp.expm1(s), 0.0)  # relu(e^s - 1)


def _rectified_h(s, xp):
    return xp.abs(xp.expm1(s))  # |e^s - 1|


#: a rectified softmax written against the array namespace, run natively on tensors
RECTIFIED = define_activation("rectified_torch", _rectified_g, _rectified_h, singular_scores=[0.0])


def _sharp():
    return define_activation("sharp_tanhmax_torch", lambda s, xp: xp.sinh(2 * s), lambda s, xp: xp.cosh(2 * s))


@pytest.mark.parametrize("make", (_sharp, lambda: RECTIFIED))
def test_an_activation_from_define_activation_runs_on_tensors(make, rng):
    act = make()
    s = away_from_singular(act, rng.standard_normal((3, 5)))
    u, mask = rng.standard_normal((3, 5)), mask_with_empty_row((3, 5), rng)
    want_w, want_g = reference_activation(act, s, u, mask=mask)
    w, g = _weights_and_grad(act, s, u, mask=mask)
    assert_close(_np(w), want_w, "define_activation weights")
    assert_close(_np(g), want_g, "define_activation gradient")
    st = _t(s, grad=True)
    assert torch.autograd.gradcheck(rt.activation(act), (st,), eps=1e-6, atol=1e-5, rtol=1e-3)
    q, k, v, _ = attention_inputs("scaled_dot", rng)
    want, _ = reference_attention(q, k, v, {}, activation=act, causal=True)
    assert_close(_np(rt.attention(_t(q), _t(k), _t(v), activation=act, causal=True)), want, "its attention")


def test_g_and_h_are_evaluated_once_a_pass(rng):
    calls = []

    def g(s, xp):
        calls.append("g")
        return _rectified_g(s, xp)

    def h(s, xp):
        calls.append("h")
        return _rectified_h(s, xp)

    counted = define_activation("rectified_counted", g, h, singular_scores=[0.0])
    s = _t(rng.standard_normal((3, 5)), grad=True)
    calls.clear()
    w = rt.activation(counted)(s)
    assert sorted(calls) == ["g", "h"]
    calls.clear()
    w.backward(_t(rng.standard_normal((3, 5))))
    assert sorted(calls) == ["g", "h"]  # h' and g' by forward mode, each through one call


def test_an_autograd_numpy_activation_is_refused_in_one_line_with_the_new_spelling():
    import autograd.numpy as anp  # noqa: PLC0415

    old = define_activation("sharp_anp_torch", lambda s: anp.sinh(2 * s), lambda s: anp.cosh(2 * s))
    with pytest.raises(TypeError, match=r"^name_or_activation: .*autograd.numpy.*def g\(s, xp\)"):
        rt.activation(old)
    with pytest.raises(TypeError, match=r"^activation: .*autograd.numpy.*def g\(s, xp\)"):
        rt.Attention(activation=old)


# --- modules -------------------------------------------------------------------------------------------
def test_modules_compute_what_the_functions_do(rng):
    s = _t(scores("signexp", (3, 6), rng, extreme=False))
    assert torch.equal(rt.Activation("signexp")(s), rt.activation("signexp")(s))
    layer = rt.Attention("neural", "expressive", causal=True, d=4, dtype=torch.float64, seed=3)
    assert sorted(n for n, _ in layer.named_parameters()) == sorted(f"params.{n}" for n in
                                                                     ("Wq", "Wk", "Whq", "Whk", "bh", "wa", "ba"))
    q, k, v, _ = attention_inputs("scaled_dot", rng)
    out = layer(_t(q), _t(k), _t(v))
    params = {n: _np(p) for n, p in layer.params.items()}
    want, _ = reference_attention(q, k, v, params, score="neural", activation="expressive", causal=True)
    assert_close(_np(out), want, "Attention module")
    out.sum().backward()
    assert all(p.grad is not None and torch.all(torch.isfinite(p.grad)) for p in layer.parameters())
    with pytest.raises(TypeError, match="^d: "):
        rt.Attention("neural")


# --- torch.compile (slow: compiling takes minutes on a small machine) ---------------------------------------
class _TwoLayers(torch.nn.Module):
    """A linear layer making q, k, v, refattn's attention, then refattn's weights of its output."""

    def __init__(self, act):
        super().__init__()
        self.qkv = torch.nn.Linear(4, 12, dtype=torch.float64)
        self.attend = rt.Attention(activation=act, causal=True, dtype=torch.float64)
        self.phi = rt.Activation(act)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.phi(self.attend(q, k, v))


@pytest.mark.slow
@pytest.mark.parametrize("name", ("softmax", "rectified"))
def test_torch_compile_with_fullgraph(name, rng):
    """``torch.compile(fullgraph=True)`` compiles the model (no graph break: refattn's calls are one node
    each), and its loss and gradients equal the eager model's; ``fullgraph=False`` compiles the functional
    :func:`refattn.torch.attention` too."""
    act = RECTIFIED if name == "rectified" else name
    model, x = _TwoLayers(act), _t(rng.standard_normal((2, 5, 4)))
    u = _t(rng.standard_normal((2, 5, 4)))
    eager = (model(x) * u).sum()
    want = torch.autograd.grad(eager, list(model.parameters()))
    compiled = (torch.compile(model, fullgraph=True)(x) * u).sum()
    got = torch.autograd.grad(compiled, list(model.parameters()))
    assert_close(_np(compiled), _np(eager), f"{name}: compiled loss")
    for a, b in zip(got, want):
        assert_close(_np(a), _np(b), f"{name}: compiled gradient")
    q, k, v = (_t(rng.standard_normal((2, 5, 4))) for _ in range(3))
    attend = torch.compile(lambda q, k, v: rt.attention(q, k, v, activation=act, causal=True), fullgraph=False)
    assert_close(_np(attend(q, k, v)), _np(rt.attention(q, k, v, activation=act, causal=True)),
                 f"{name}: compiled attention function")


# --- bad input: one line naming the argument -----------------------------------------------------------
def test_bad_input_names_the_argument(rng):
    s = _t(rng.standard_normal((2, 3)))
    with pytest.raises(TypeError, match="^s: expected a torch.Tensor"):
        rt.activation("softmax")(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="^name_or_activation: unknown activation 'nope'"):
        rt.activation("nope")
    with pytest.raises(TypeError, match="^mask: expected dtype bool"):
        rt.activation("softmax")(s, mask=torch.ones((2, 3)))
    with pytest.raises(TypeError, match="^s: expected a floating-point tensor .*got torch.int64"):
        rt.activation("softmax")(torch.ones((2, 3), dtype=torch.int64))
    with pytest.raises(TypeError, match="^arrays: got NumPy and PyTorch arrays"):
        rt.attention(s[None], s[None], s[None], score="global", params={"v": np.zeros(3)})
    with pytest.raises(ValueError, match="^axis: 5 is out of range"):
        rt.activation("softmax")(s, dim=5)
    with pytest.raises(TypeError, match=r"^v: dtype torch.float32 differs from q's torch.float64; .*v.to\(torch.float64\)"):
        rt.attention(s[None], s[None], s[None].float())


# --- CUDA, where a GPU is present ----------------------------------------------------------------------
@CUDA
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_cuda_equals_numpy(name, rng):
    s = scores(name, (3, 4, 6), rng)
    u, mask = rng.standard_normal(s.shape), mask_with_empty_row(s.shape, rng)
    want_w, want_g = reference_activation(name, s, u, mask=mask)
    w, g = _weights_and_grad(name, s, u, mask=mask, device="cuda")
    assert w.device.type == "cuda" and g.device.type == "cuda"
    assert_close(_np(w), want_w, f"{name} weights on CUDA")
    assert_close(_np(g), want_g, f"{name} gradient on CUDA")
    q, k, v, _ = attention_inputs("scaled_dot", rng)
    want, _ = reference_attention(q, k, v, {}, activation=name, causal=True)
    out = rt.attention(*(_t(x, device="cuda") for x in (q, k, v)), activation=name, causal=True)
    assert out.device.type == "cuda"  # the causal mask was made on the device
    assert_close(_np(out), want, f"{name} causal attention on CUDA")


# --- the book's page and notebook 15 run with PyTorch and JAX installed ----------------------------------
def _python_blocks(path):
    import re  # noqa: PLC0415

    return re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), re.S | re.M)


def test_the_frameworks_page_runs_as_written():
    from pathlib import Path  # noqa: PLC0415

    pytest.importorskip("jax", reason="the page's JAX block needs JAX (pip install -e '.[jax]')")
    blocks = _python_blocks(Path(__file__).resolve().parents[2] / "docs" / "frameworks.md")
    assert len(blocks) == 3
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/frameworks.md[block {i}]", "exec"), {"__name__": "__main__"})  # noqa: S102


@pytest.mark.slow
def test_notebook_15_sets_the_papers_code_beside_refattn_in_every_framework(tmp_path):
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    pytest.importorskip("jax", reason="this run of notebook 15 needs JAX too (pip install -e '.[jax]')")
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "notebooks/15_papers_code.py"], cwd=root, capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg", "REFATTN_SMALL": "1",
                            "REFATTN_FIGDIR": str(tmp_path), "PYTHONPATH": str(root)}, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "libraries: NumPy, PyTorch, JAX" in r.stdout
    for lib in ("NumPy", "PyTorch", "JAX"):  # every case: the paper's code fails, refattn's stays finite
        paper = [line for line in r.stdout.splitlines() if line.startswith("the paper's") and f" {lib} " in line]
        ours = [line for line in r.stdout.splitlines() if line.startswith("refattn") and f" {lib} " in line]
        assert len(paper) == len(ours) == 6, (lib, len(paper), len(ours))
        assert all(line.endswith("(finite); gradient finite") for line in ours), ours
        assert sum("not finite" in line for line in paper) == 5  # case B is finite, with weights of size 1e9
    assert (tmp_path / "15_tanhmax_overflow.png").exists()
