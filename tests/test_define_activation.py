"""refattn.define_activation: an activation from a user's g and h works wherever a built-in does.

Two activations no paper here uses, defined from g and h alone, are compared
with an independent reference (phi written directly with autograd.numpy,
autograd's VJP of it, and attention written out by hand) in the forward pass,
the VJP and the attention output and gradients, to 1e-10:

* softplus-max: g = h = softplus(s) = log(1 + e^s)  (rho = 1);
* algebraic sign-max: g(s) = s, h(s) = sqrt(1 + s^2)  (rho = s / sqrt(1 + s^2),
  odd like TanhMax's tanh, with a normaliser that grows like |s| instead of e^|s|).
"""

import json
import warnings

import autograd.numpy as anp
import matplotlib
import numpy as np
import pytest
from autograd import make_vjp

matplotlib.use("Agg")

from refattn.theory.proposition1 import closed_form_delta_II
import refattn  # noqa: E402
from refattn import fast  # noqa: E402
from refattn.core.activations import Activation, activation  # noqa: E402
from refattn.core.attention import attention, attention_backward  # noqa: E402
from refattn.cli import main as cli_main  # noqa: E402
from refattn.custom import NonFiniteError, define_activation, unregister  # noqa: E402
from refattn.theory.proposition1 import closed_form_delta_II, delta_II, pi_matrix, score_velocity  # noqa: E402
from refattn.fast.kernels import PaperForm, kernel  # noqa: E402
from refattn.fast.streaming import streaming_attention, streaming_attention_backward  # noqa: E402
from refattn.core.gradcheck import gradcheck  # noqa: E402
from refattn.theory.properties import measure  # noqa: E402

GRAD_NAMES = ("Q", "K", "V", "params")  # attention_backward returns (dQ, dK, dV, dparams)

TOL = 1e-10


def softplus(s):
    return anp.logaddexp(0.0, s)


def identity(s):
    return s


def root(s):
    return anp.sqrt(1.0 + s * s)


#: name -> (g, h): the two activations under test.
PAIRS = {"softplus-max": (softplus, softplus), "algebraic": (identity, root)}


@pytest.fixture(params=sorted(PAIRS))
def case(request):
    g, h = PAIRS[request.param]
    return define_activation(request.param, g, h), g, h


def reference_phi(g, h):
    """phi written directly: g(s) / sum_k h(s_k) along the last axis (no reweighting)."""
    return lambda s: g(s) / anp.sum(h(s), axis=-1, keepdims=True)


def close(a, b, tol=TOL):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    err = np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)
    assert err <= tol, f"relative error {err:.3e} > {tol:g}"


def test_is_an_activation_with_every_attribute(case):
    act, g, h = case
    assert isinstance(act, Activation)
    for attr in ("g", "h", "dg", "dh", "rho", "drho", "ell", "dell", "p", "forward", "backward", "jacobian"):
        assert callable(getattr(act, attr))
    assert act.name in repr(act) and act.source
    assert act.same_g_h == (g is h)
    # the facts a built-in class holds, which the user activation carries itself
    assert act.shift_invariant is False and act.formula.rho == ("1" if g is h else "g/h")
    assert act.regularity == "log" and act.singular == () and act.singular_scores == ()
    assert act.given == ()  # both derivatives from autograd


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_forward_and_vjp_match_the_direct_reference(case, shape, rng):
    act, g, h = case
    phi = reference_phi(g, h)
    s, u = 2.0 * rng.standard_normal(shape), rng.standard_normal(shape)
    close(act(s), phi(s))
    vjp_fn, _ = make_vjp(phi)(s)
    close(act.backward(u, act.forward(s)[1]), vjp_fn(u))
    close(closed_form_delta_II(act, s, u), vjp_fn(u))  # Proposition 1's closed form is the VJP with cotangent o
    if len(shape) == 1:
        J = np.stack([vjp_fn(e) for e in np.eye(shape[0])])  # J[j, k] = d phi_j / d s_k
        close(act.jacobian(s), J)


def test_other_axis_and_mask_match_the_reference(case, rng):
    act, g, h = case
    s, u = 2.0 * rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    mask = rng.random((5, 4)) < 0.7
    mask[:, 0] = True

    def phi(s):  # masked entries have h = 0 and no weight, along axis 0
        hs = anp.where(mask, h(s), 0.0)
        return anp.where(mask, g(s), 0.0) / anp.sum(hs, axis=0, keepdims=True)

    close(act(s, axis=0, mask=mask), phi(s))
    close(act.backward(u, act.forward(s, axis=0, mask=mask)[1]), make_vjp(phi)(s)[0](u))


def test_gradcheck_passes(case, rng):
    act, _, _ = case
    s = 2.0 * rng.standard_normal((3, 6))
    gradcheck(act, {"s": s}, lambda u, s: {"s": act.backward(u, act.forward(s)[1])}, name=act.name).assert_ok()


def _attention_reference(g, h, Q, K, V):
    S = Q @ anp.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])  # scaled dot product
    return reference_phi(g, h)(S) @ V


def test_attention_reference_and_fast_match_the_direct_reference(case, rng):
    act, g, h = case
    Q, K, V = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    want = _attention_reference(g, h, Q, K, V)
    dY = rng.standard_normal(want.shape)
    grads = {}
    for name, i in (("Q", 0), ("K", 1), ("V", 2)):
        def f(x, i=i):
            args = [Q, K, V]
            args[i] = x
            return _attention_reference(g, h, *args)
        grads[name] = make_vjp(f)((Q, K, V)[i])[0](dY)
    assert type(kernel(act)) is PaperForm  # the fast path's route for an activation given as g and h
    for module in (refattn.core.attention, fast):
        out, cache = module.attention(Q, K, V, activation=act)
        close(out, want)
        back = dict(zip(GRAD_NAMES, module.attention_backward(dY, cache)))
        for name in "QKV":
            close(back[name], grads[name])


def test_fast_blocked_route_matches_reference(case, rng):
    """Large enough for the fast path's blocks and threads."""
    act, _, _ = case
    Q, K, V = (rng.standard_normal((8, 4, 64, 8)) for _ in range(3))
    out, cache = attention(Q, K, V, activation=act, causal=True)
    out_f, cache_f = fast.attention(Q, K, V, activation=act, causal=True)
    close(out_f, out, 1e-12)
    dY = rng.standard_normal(out.shape)
    b, b_f = dict(zip(GRAD_NAMES, attention_backward(dY, cache))), dict(zip(GRAD_NAMES, fast.attention_backward(dY, cache_f)))
    for name in "QKV":
        close(b_f[name], b[name], 1e-12)


@pytest.mark.parametrize("reading", [False, True])
def test_streaming_matches_reference(case, reading, rng):
    """Streaming, on the fast route (strips of the fast path, the activation's own ell and rho through
    the generic kernel) and on the reading loop: the reference's numbers, causal and with a mask."""
    act, _, _ = case
    Q, K, V = (rng.standard_normal((2, 2, 40, 4)) for _ in range(3))
    dY = rng.standard_normal(V.shape)
    mask = rng.random((40, 40)) < 0.8
    for kw in ({"causal": True}, {"mask": mask}):
        out, cache = attention(Q, K, V, activation=act, **kw)
        b = dict(zip(GRAD_NAMES, attention_backward(dY, cache)))
        for block_size in (None, 7):
            out_s, cache_s = streaming_attention(Q, K, V, activation=act, block_size=block_size, reading=reading, **kw)
            assert cache_s["route"] == ("reading" if reading else "fast")
            close(out_s, out, 1e-12)
            b_s = dict(zip(GRAD_NAMES, streaming_attention_backward(dY, cache_s)))
            for name in "QKV":
                close(b_s[name], b[name], 1e-12)


def test_proposition_1_and_properties(case, rng):
    act, g, h = case
    s, o = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
    close(closed_form_delta_II(act, s, o), delta_II(act, s, o))
    c, dI = rng.standard_normal(4), rng.standard_normal((4, 6))
    close(score_velocity(act, s, o, c, dI), -dI * delta_II(act, s, o) * c[:, None])
    row = s[0]
    close(pi_matrix(act, row), act.jacobian(row).T)  # pi_ij = d w_j / d s_i from g, h, dg, dh
    m = measure(act)
    holds = {k: v["holds"] for k, v in m.items() if isinstance(v, dict) and "holds" in v}
    assert holds["monotonicity"] and holds["contextual_normalisation"]
    assert holds["origin_symmetry"] == (act.name == "algebraic")  # g(s) = s is odd, softplus is not


def test_notebook_01_figures_draw(case, tmp_path, monkeypatch):
    """The panels notebook 01 draws for every built-in, drawn for a user activation."""
    import matplotlib.pyplot as plt

    from refattn.plots import save

    monkeypatch.setenv("REFATTN_FIGDIR", str(tmp_path))
    act, _, _ = case
    grid = np.linspace(-4.0, 4.0, 80)
    fig, axes = plt.subplots(1, 5, figsize=(10, 2))
    for ax, method in zip(axes, ("g", "h", "rho", "ell")):
        y = getattr(act, method)(grid)
        assert np.all(np.isfinite(y))
        ax.plot(grid, y)
    s_row = np.array([-2.0, -1.1, -0.3, 0.2, 0.6, 1.0, 1.7, 2.4])
    axes[4].bar(np.arange(8), act(s_row))
    assert save(fig, f"custom_{act.name}") is not None
    plt.close(fig)
    assert (tmp_path / f"custom_{act.name}.png").is_file()


def test_float32_keeps_its_dtype(case, rng):
    act, _, _ = case
    s = rng.standard_normal((3, 5)).astype(np.float32)
    w = act(s)
    assert w.dtype == np.float32
    assert act.backward(np.ones_like(s), act.forward(s)[1]).dtype == np.float32


# ------------------------------------------------------------------------------
# Hand-given derivatives
# ------------------------------------------------------------------------------


def test_correct_hand_derivatives_are_accepted_and_used():
    def dsoftplus(s):
        return 0.5 * (1.0 + anp.tanh(0.5 * s))  # sigmoid

    act = define_activation("softplus-max-hand", softplus, softplus, dg=dsoftplus, dh=dsoftplus)
    assert act.given == ("dg", "dh")
    s = np.linspace(-3, 3, 7)
    close(act.dh(s), dsoftplus(s))


def test_wrong_hand_derivative_is_refused_naming_function_and_worst_point():
    def dh_wrong(s):  # right for s < 2, 10% off beyond
        return anp.where(s < 2.0, s / anp.sqrt(1.0 + s * s), 1.1 * s / anp.sqrt(1.0 + s * s))

    with pytest.raises(ValueError) as info:
        define_activation("algebraic-bad", identity, root, dh=dh_wrong)
    msg = str(info.value)
    assert len(msg.splitlines()) == 1
    assert msg.startswith("dh (dh_wrong): does not match autograd's derivative of h (root)")
    worst = float(msg.split("worst at s = ")[1].split(",")[0])
    assert worst >= 2.0  # the worst point is where it is wrong
    with pytest.raises(ValueError, match=r"^dg: does not match autograd's derivative of g"):
        define_activation("x", identity, root, dg=lambda s: 1.0 + 0.0 * s + 1e-3 * s * s)


@pytest.mark.parametrize("kwargs, match", [
    ({"name": ""}, r"^name: expected a non-empty string"),
    ({"name": "softmax"}, r"^name: 'softmax' is a built-in activation"),
    ({"name": "softpick"}, r"^name: 'softpick' is a built-in activation"),  # the normalisers are built in too
    ({"g": 3.0}, r"^g: expected a function"),
    ({"h": lambda s: s}, r"^h: must be >= 0"),
    ({"h": lambda s: anp.sum(s * s) + 0.0 * s}, r"^h: is not elementwise"),
    ({"g": lambda s: anp.sqrt(s)}, r"^g: is NaN at s = "),
    ({"g": lambda s: s, "h": lambda s: anp.maximum(s, 0.0)}, r"^g: is .* where h = 0"),
    ({"regularity": "wild"}, r"^regularity: expected one of"),
    ({"singular_scores": [float("nan")]}, r"^singular_scores: expected finite"),
])
def test_bad_definitions_are_one_line_naming_the_argument(kwargs, match):
    args = {"name": "user", "g": identity, "h": root, **kwargs}
    with pytest.raises((ValueError, TypeError), match=match) as info:
        define_activation(args.pop("name"), args.pop("g"), args.pop("h"), **args)
    assert len(str(info.value).splitlines()) == 1


@pytest.mark.parametrize("name", ["softmax", "softpick"])
def test_a_built_in_cannot_be_unregistered(name):
    with pytest.raises(ValueError, match=rf"^name: '{name}' is a built-in activation and cannot be unregistered$"):
        unregister(name)
    assert activation(name).name == name


# ------------------------------------------------------------------------------
# Non-finite results are reported, never returned
# ------------------------------------------------------------------------------


def test_non_finite_results_raise_naming_the_activation_and_the_score():
    act = define_activation("algebraic", identity, root)  # 1 + s^2 overflows beyond 1.3e154
    s = np.array([0.5, 1e200, -1.0])
    for call in (lambda: act(s), lambda: act.backward(np.array([1.0, -2.0, 0.5]), act.forward(s)[1]),
                 lambda: attention(np.array([[1e100]]), np.array([[1e100], [1.0]]),
                                   np.ones((2, 1)), score="dot", activation=act)):
        with pytest.raises(NonFiniteError) as info:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no NumPy warning on the way either
                call()
        msg = str(info.value)
        assert msg.startswith("activation 'algebraic': ")
        assert "s = 1e+200" in msg and ("not finite" in msg or "+inf" in msg)
    exp_act = define_activation("exp-max", anp.exp, anp.exp)  # softmax written naively
    with pytest.raises(NonFiniteError, match=r"'exp-max': ell = log h is \+inf .* at s = 800.0"):
        exp_act(np.array([0.0, 800.0]))
    assert isinstance(NonFiniteError("x"), ValueError)  # the command line's one-line errors


def test_h_zero_everywhere_is_the_no_normaliser_convention():
    act = define_activation("softplus-max", softplus, softplus)
    s = np.array([[-800.0, -900.0, -1000.0], [0.0, 1.0, -800.0]])  # softplus underflows to 0
    w = act(s)
    assert np.all(w[0] == 0.0) and np.isclose(w[1].sum(), 1.0) and w[1, 2] == 0.0
    assert np.all(act.backward(np.array([[1.0, 2.0, 3.0], [1.0, -1.0, 2.0]]), act.forward(s)[1])[0] == 0.0)


def test_cupy_arrays_are_refused_clearly(monkeypatch):
    import refattn.custom as custom

    act = define_activation("softplus-max", softplus, softplus)
    monkeypatch.setattr(custom, "on_host", lambda s: False)  # as if s were a CuPy array
    monkeypatch.setattr(custom, "_LIBRARIES", {"numpy": "CuPy"})
    with pytest.raises(TypeError, match=r"^s: .*autograd.numpy, which runs on NumPy arrays only; to run it on "
                                        r"CuPy's own arrays, write .*def g\(s, xp\)"):
        act.g(np.zeros(3))


def test_functions_of_the_namespace_are_checked_as_autograd_numpy_ones(rng):
    """``g(s, xp)`` is handed NumPy, or autograd's NumPy while the check traces it: the same activation."""
    old = define_activation("softplus-max-anp", softplus, softplus)
    new = define_activation("softplus-max-xp", lambda s, xp: xp.logaddexp(0.0, s),
                            lambda s, xp: xp.logaddexp(0.0, s))
    assert new.native and not old.native
    s, u = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    assert np.array_equal(new(s), old(s))
    assert np.allclose(new.backward(u, new.forward(s)[1]), old.backward(u, old.forward(s)[1]), rtol=1e-14, atol=0)


# ------------------------------------------------------------------------------
# Registration and the command line
# ------------------------------------------------------------------------------


def test_register_makes_the_name_resolve_but_not_the_builtin_tuple(rng):
    act = define_activation("softplus-max-reg", softplus, softplus, register=True)
    try:
        assert activation("softplus-max-reg") is act
        assert "softplus-max-reg" not in refattn.ACTIVATIONS
        Q, K, V = (rng.standard_normal((3, 2)) for _ in range(3))
        close(attention(Q, K, V, activation="softplus-max-reg")[0], attention(Q, K, V, activation=act)[0])
        with pytest.raises(ValueError, match="already registered"):
            define_activation("softplus-max-reg", softplus, softplus, register=True)
    finally:
        unregister("softplus-max-reg")
    with pytest.raises(ValueError, match="unknown activation"):
        activation("softplus-max-reg")
    with pytest.raises(ValueError, match="built-in"):
        unregister("softmax")


USER_FILE = '''
import autograd.numpy as anp
from refattn.custom import define_activation

def softplus(s):
    return anp.logaddexp(0.0, s)

SOFTPLUS_MAX = define_activation("softplus-max", softplus, softplus)
ALGEBRAIC = {"g": lambda s: s, "h": lambda s: anp.sqrt(1.0 + s * s)}
KINKED = {"g": lambda s: anp.maximum(s, 0.0), "h": lambda s: 1.0 + 0.0 * s, "singular_scores": [0.0],
          "regularity": "kink"}
BROKEN = {"g": lambda s: s, "h": lambda s: anp.sqrt(1.0 + s * s), "dh": lambda s: 2.0 * s}
NOT_ONE = 42
'''


@pytest.mark.parametrize("name", ["SOFTPLUS_MAX", "ALGEBRAIC", "KINKED"])
def test_check_activation_from_a_file(tmp_path, capsys, name):
    path = tmp_path / "mine.py"
    path.write_text(USER_FILE)
    assert cli_main(["check", "--activation", f"{path}:{name}"]) == 0
    out = capsys.readouterr().out
    assert "all checks passed" in out
    assert cli_main(["check", "--json", "--activation", f"{path}:{name}"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] and result["rows"][0]["status"] == "ok"
    # random, masked and spread rows, then one row at each declared singular score
    assert [r["singular"] for r in result["rows"]] == [False] * 3 + ([True] if name == "KINKED" else [])


@pytest.mark.parametrize("spec, match", [
    ("{tmp}/mine.txt", "expected FILE.py:NAME or FILE.py"),
    ("{path}:NOPE", "defines no 'NOPE'"),
    ("{path}:NOT_ONE", "is a int; expected an Activation"),
    ("{tmp}/missing.py:X", "no such file"),
])
def test_check_activation_bad_input_is_one_line_exit_2(tmp_path, capsys, spec, match):
    path = tmp_path / "mine.py"
    path.write_text(USER_FILE)
    code = cli_main(["check", "--activation", spec.format(path=path, tmp=tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and match in err, err


def test_check_activation_reports_a_non_finite_activation_as_a_failure(tmp_path, capsys):
    path = tmp_path / "bad.py"
    path.write_text("import autograd.numpy as anp\n"
                    "NAN_AT_3 = {'g': lambda s: s, 'h': lambda s: anp.where(s > 3.5, anp.nan, 1.0 + s * s)}\n")
    # NaN beyond 3.5 only: the definition's grid is [-10, 10], so it is refused at once: a failed check
    assert cli_main(["check", "--activation", f"{path}:NAN_AT_3"]) == 1
    assert "REFUSED when defined: h: is NaN at s = " in capsys.readouterr().out


def test_check_activation_reports_overflow_during_the_check_as_a_failed_row(tmp_path, capsys):
    path = tmp_path / "steep.py"
    path.write_text("import autograd.numpy as anp\n"
                    "def h(s):\n    return anp.exp(300.0 * s)\n"
                    "STEEP = {'g': h, 'h': h}\n")  # h = e^{300 s} overflows for s > 2.37
    assert cli_main(["check", "--json", "--activation", f"{path}:STEEP"]) == 1
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["status"] == "FAIL: not finite" and not row["ok"]
    assert row["note"].startswith("activation 'STEEP': ell = log h is +inf")


def test_a_convention_broken_beyond_the_check_grid_is_caught_when_it_happens():
    act = define_activation("sign-flip", identity, lambda s: anp.where(s > 50.0, -1.0, 1.0 + s * s))
    with pytest.raises(ValueError, match=r"^activation 'sign-flip': h is negative .* at s = 60.0"):
        act(np.array([0.0, 60.0]))


@pytest.mark.parametrize("g, h, message", [
    (lambda s: anp.exp(s) + 0j, anp.exp, r"^g: returned complex values \(complex128\); g and h must be real$"),
    (anp.exp, lambda s: anp.exp(s) * (1 + 1j), r"^h: returned complex values"),
    (lambda s: (s > 0).astype(int), anp.exp, r"^g: returned integer values \(int64\), which autograd cannot "),
    (anp.exp, lambda s: 1, r"^h: returned integer values"),
    (lambda s: s > 0, anp.exp, r"^g: returned boolean values \(bool\)"),
    (lambda s: anp.exp(s)[:, None], anp.exp, r"^g: returned shape \(\d+, 1\) for scores of shape \(\d+,\)"),
    (anp.exp, lambda s: anp.sum(anp.exp(s), keepdims=True), r"^h: returned shape \(1,\)"),
    (lambda s: "x", anp.exp, r"^g: returned a str for an array of scores"),
    (lambda s: list(s), anp.exp, r"^g: returned a list for an array of scores"),
    (lambda s: None, anp.exp, r"^g: returned None for an array of scores"),
    (lambda s: anp.exp(s).astype(np.float32), anp.exp, r"^g: returned float32 values for float64 scores"),
    (lambda s: np.exp(np.asarray(s)), anp.exp, r"^g \(differentiated by autograd; write it with autograd.numpy"),
    (lambda s: __import__("sys").exit(0), anp.exp, r"^g: called sys.exit\(0\) on an array of scores$"),
])
def test_define_activation_refuses_what_it_cannot_differentiate_or_evaluate_at_definition(g, h, message):
    """Complex, integer or boolean values, a wrong shape, a non-array, less precision, a function
    autograd cannot trace, or one that exits: refused when defined, in one line naming g or h,
    not at the first use with autograd's message."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=message) as refused:
            define_activation("refused", g, h)
    assert "\n" not in str(refused.value)


def test_a_constant_normaliser_written_as_a_float_is_still_accepted():
    act = define_activation("linear-over-one", lambda s: s, lambda s: 1.0)
    assert np.allclose(act(np.array([1.0, -2.0])), [0.5, -1.0])  # s_i / sum_k 1
