"""Every activation, score and attention on the ``xp`` backends, against NumPy.

The ``xp`` fixture (``tests/conftest.py``) runs each test on

* ``numpy``: a copy of the inputs on NumPy; numpy-vs-numpy, so it checks the
  comparison itself and that no input is modified;
* ``fake_device``: NumPy behind an array type that refattn treats as a CuPy
  array and that raises on an implicit host copy, a NumPy call on its data, or
  a mix with host arrays (``tests/fake_device.py``); this runs the GPU branch
  of every ``array_module`` call on the CPU, so CI catches code that would
  break on a GPU;
* ``cupy``: CuPy on a CUDA device (skipped where there is none).

Each test writes its computation once, as ``run(inputs) -> {name: array}``,
and :func:`check_parity` runs it on NumPy and on ``xp`` from the same inputs.
Tolerances are norm-wise (:func:`refattn.core.gradcheck.compare`),
``max |xp - numpy| <= tol * max |numpy| + extra``:

* float64: ``tol = 1e-12``, ``extra = 0``;
* float32: ``tol = 1e-5`` (about 80 float32 ulps of the largest entry) and
  ``extra = 4 max |numpy32 - numpy64|``, four times NumPy's own float32
  rounding error on the same problem, measured against NumPy in float64 on
  the same (exactly upcast) inputs. Two correct float32 implementations each
  carry their own rounding error, so they may differ by about twice it; the
  allowance matters only for results that are sums with cancellation, such
  as neural's ``dba``, a sum over every pair (up to 5e-6 relative in float32
  at these sizes, over 20 seeds).

Beyond values, a result must be an ``xp.ndarray`` with the reference's dtype
and shape, and the inputs must be unchanged afterwards. Tests at the end show
that these checks fail on a perturbed result and that the fake device catches
host code.
"""

import ast
from pathlib import Path

import numpy as np
import pytest

from tests import fake_device
from refattn import ACTIVATIONS, SCORES, activation, score
from refattn.core.activations import TanhMax
from refattn.core import attention as reference
from refattn import fast
from refattn.fast import streaming
from refattn.core.backend import to_numpy
from refattn.core.gradcheck import compare

from tests.support import random_scores

GRAD_NAMES = ("Q", "K", "V", "params")  # attention_backward returns (dQ, dK, dV, dparams)

#: norm-wise relative tolerance of xp against NumPy, per dtype
TOL = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-5}
#: float32 only: allowed multiple of NumPy's own float32 rounding error (vs float64)
ROUNDING_FACTOR = 4.0
DTYPES = [pytest.param(np.float64, id="float64"), pytest.param(np.float32, id="float32")]


def assert_parity(got, want, xp, what, want64=None):
    """Raise ``AssertionError`` unless ``got`` (on ``xp``) matches ``want`` (NumPy).

    ``got`` must be an ``xp.ndarray`` of ``want``'s dtype and shape, and
    ``max |got - want| <= TOL[dtype] * max |want| + extra`` (a NaN fails),
    where ``extra = ROUNDING_FACTOR * max |want - want64|`` when the float64
    reference ``want64`` of a float32 result is given, else 0.
    """
    name = xp.__name__
    if not isinstance(got, xp.ndarray):
        raise AssertionError(f"{what}: expected a {name}.ndarray, got {type(got).__name__}")
    if got.dtype != want.dtype:
        raise AssertionError(f"{what}: dtype {got.dtype} on {name}, {want.dtype} on numpy")
    host = to_numpy(got)
    if host.shape != want.shape:
        raise AssertionError(f"{what}: shape {host.shape} on {name}, {want.shape} on numpy")
    tol = TOL[want.dtype]
    extra = 0.0
    if want64 is not None:
        extra = ROUNDING_FACTOR * float(np.max(np.abs(want.astype(np.float64) - want64), initial=0.0))
    c = compare(host, want, check=name, arg=what, rtol=tol, atol=extra)
    if not c.ok:
        raise AssertionError(
            f"{what}: {name} and numpy differ by {c.max_abs:.3e} at index {c.where} "
            f"(relative to max |numpy| = {c.scale:.3e}: {c.max_rel:.3e}; allowed "
            f"{tol:g} relative + {extra:.3e})"
        )
    return c


def assert_unchanged(device_inputs, host_inputs):
    """The inputs given to refattn on ``xp`` still equal their host originals."""
    for name, h in host_inputs.items():
        d = device_inputs[name]
        if d is not None and not np.array_equal(to_numpy(d), h):
            raise AssertionError(f"{name}: refattn modified its input in place")


def to_device(xp, host):
    """A copy of each host array on ``xp`` (``None`` stays ``None``)."""
    return {k: (None if v is None else xp.array(v)) for k, v in host.items()}


def _upcast(host):
    """float32 arrays as float64 (exactly); everything else unchanged."""
    return {k: (v.astype(np.float64) if getattr(v, "dtype", None) == np.float32 else v)
            for k, v in host.items()}


def check_parity(run, host, xp, dtype):
    """Run ``run`` on NumPy and on ``xp`` from the same ``host`` inputs; compare every result.

    ``run(inputs) -> {name: array or None}`` must use only its ``inputs``
    (a dict of arrays, all on one backend). The NumPy results must keep
    ``dtype``; a ``None`` result must be ``None`` on ``xp`` too.
    """
    want = run(dict(host))
    want64 = run(_upcast(host)) if np.dtype(dtype) == np.float32 else {}
    dev = to_device(xp, host)
    got = run(dev)
    assert set(got) == set(want)
    for what, w in want.items():
        if w is None:
            assert got[what] is None, f"{what}: None on numpy, not on {xp.__name__}"
            continue
        assert w.dtype == dtype, f"{what}: numpy changed the dtype to {w.dtype}"
        assert_parity(got[what], w, xp, what, want64.get(what))
    assert_unchanged(dev, host)


# --------------------------------------------------------------------------
# Activations: forward, p, VJP, elementwise parts, explicit Jacobian
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_parity(name, dtype, xp, rng):
    act = activation(name)
    s = random_scores(name, (3, 4, 6), rng).astype(dtype)
    mask = rng.random(s.shape) < 0.7
    mask[0, :, 0] = False  # one fully masked row along axis 1: the no-normaliser convention
    host = {"s": s, "u": rng.standard_normal(s.shape).astype(dtype), "mask": mask}

    def run(a):
        res = {}
        for axis, m in ((1, a["mask"]), (-1, None)):  # axis -1: the batched-matmul row dot
            res[f"forward axis={axis}"] = act(a["s"], axis=axis, mask=m)
            res[f"p axis={axis}"] = act.p(a["s"], axis=axis, mask=m)
            res[f"vjp axis={axis}"] = act.backward(a["u"], act.forward(a["s"], axis=axis, mask=m)[1])
        for fn in ("g", "h", "dg", "dh", "rho", "drho", "dell"):
            res[fn] = getattr(act, fn)(a["s"])
        res["jacobian"] = act.jacobian(a["s"][0, :, 0])
        return res

    check_parity(run, host, xp, dtype)


# --------------------------------------------------------------------------
# Scores: forward and VJP (q, k and every parameter)
# --------------------------------------------------------------------------

D, N_Q, N_K = 4, 5, 6
SCORE_CASES = [pytest.param(n, {}, {}, id=n) for n in SCORES] + [
    pytest.param("neural", {"hidden": "relu"}, {"d_prime": 2, "hidden_size": 3}, id="neural-relu"),
    pytest.param("neural", {}, {"d_prime": 2, "hidden_size": 3, "per_pair": (N_Q, N_K)},
                 id="neural-per_pair"),
]


def _with_params(host, params):
    return {**host, **{f"params[{p}]": v for p, v in params.items()}}


def _params(inputs):
    return {k[7:-1]: v for k, v in inputs.items() if k.startswith("params[")}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,opts,sizes", SCORE_CASES)
def test_score_parity(name, opts, sizes, dtype, xp, rng):
    sc = score(name, **opts)
    n_q = N_Q if sc.pairwise else N_K
    # q broadcasts over the first batch axis of k: the VJP must sum dq over it
    q = rng.standard_normal((1, 3, n_q, D)).astype(dtype) if sc.uses_q else None
    k = rng.standard_normal((2, 3, N_K, D)).astype(dtype)
    params = sc.init_params(D, rng, dtype=dtype, **sizes)
    s_shape = (2, 3) + ((n_q, N_K) if sc.pairwise else (N_K,))
    host = _with_params({"q": q, "k": k, "u": rng.standard_normal(s_shape).astype(dtype)}, params)

    def run(a):
        P = _params(a)
        dq, dk, dP = sc.backward(a["u"], sc.forward(a["q"], a["k"], P)[1])
        assert set(dP) == set(P)
        return {"forward": sc(a["q"], a["k"], P), "dq": dq, "dk": dk,
                **{f"d{p}": v for p, v in dP.items()}}

    check_parity(run, host, xp, dtype)


# --------------------------------------------------------------------------
# Attention: forward and backward
# --------------------------------------------------------------------------

B, H, N, DK, DV = 2, 3, 7, 8, 5


def _qk_away_from_zero(rng, dtype):
    """Q, K whose scaled dot scores satisfy ``|s| > 0.3`` (checked).

    Coordinate 0 carries 1.5 in every query and +-1.5 in every key, the others
    are N(0, 0.25^2), so ``s sqrt(d) = +-2.25 + (a sum of small terms)``. A GPU
    rounds ``Q K^T`` differently from NumPy; near a singular score (0 for
    signexp, relu, cosformer; small |s| for expressive, whose ell' = 2/s is
    large) that difference would be amplified without bound (signexp's sign
    can flip). Away from 0 every activation is smooth.
    """
    Q = 0.25 * rng.standard_normal((B, H, N, DK))
    K = 0.25 * rng.standard_normal((B, H, N, DK))
    Q[..., 0] = 1.5
    K[..., 0] = 1.5 * rng.choice([-1.0, 1.0], size=(B, H, N))
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(DK)
    assert np.min(np.abs(s)) > 0.3, "test data: scores too close to 0"
    return Q.astype(dtype), K.astype(dtype)


class _Streaming:
    """Streaming attention (:mod:`refattn.fast.streaming`) as a third attention path, in blocks
    of 3 queries and keys so that N = 7 spans three blocks with a partial last one. On NumPy it
    takes the fast route, on a device array the reading loop: both must give the reference's
    numbers."""

    @staticmethod
    def attention(Q, K, V, **kw):
        return streaming.streaming_attention(Q, K, V, block_size=3, **kw)

    attention_backward = staticmethod(streaming.streaming_attention_backward)


IMPLS = [pytest.param(reference, id="reference"), pytest.param(fast, id="fast"),
         pytest.param(_Streaming, id="streaming")]


def _attention_run(impl, **kw):
    """``run`` for :func:`check_parity`: ``impl.attention``, then its backward."""

    def run(a):
        out, cache = impl.attention(a["Q"], a["K"], a["V"], params=_params(a), mask=a.get("mask"), **kw)
        g = dict(zip(GRAD_NAMES, impl.attention_backward(a["G"], cache)))
        return {"out": out, "dQ": g["Q"], "dK": g["K"], "dV": g["V"],
                **{f"d{p}": v for p, v in g["params"].items()}}

    return run


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_attention_parity_every_activation(act, dtype, impl, xp, rng):
    Q, K = _qk_away_from_zero(rng, dtype)
    mask = rng.random((B, 1, N, N)) < 0.7
    mask[..., 0] = True
    mask[0, 0, 3, :] = False  # one query sees no key: weights 0, output 0
    host = {"Q": Q, "K": K, "V": rng.standard_normal((B, H, N, DV)).astype(dtype),
            "G": rng.standard_normal((B, H, N, DV)).astype(dtype)}
    check_parity(_attention_run(impl, activation=act), host, xp, dtype)
    check_parity(_attention_run(impl, activation=act, causal=True), {**host, "mask": mask}, xp, dtype)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sc", SCORES)
def test_attention_parity_every_score(sc, dtype, impl, xp, rng):
    s_obj = score(sc)
    n_out = N if s_obj.pairwise else 1
    host = {"Q": None if sc == "global" else rng.standard_normal((B, H, N, DK)).astype(dtype),
            "K": rng.standard_normal((B, H, N, DK)).astype(dtype),
            "V": rng.standard_normal((B, H, N, DV)).astype(dtype),
            "G": rng.standard_normal((B, H, n_out, DV)).astype(dtype)}
    host = _with_params(host, s_obj.init_params(DK, rng, dtype=dtype))
    check_parity(_attention_run(impl, score=s_obj, activation="tanhmax"), host, xp, dtype)


def test_device_arrays_do_not_mix_with_host_arrays(xp, rng):
    if xp is np:
        pytest.skip("numpy has no device arrays to mix")
    Q, K, V = (rng.standard_normal((B, H, N, DK)) for _ in range(3))
    for impl in (reference, fast):
        with pytest.raises(TypeError, match="arrays: got CuPy"):
            impl.attention(xp.array(Q), K, xp.array(V))
    with pytest.raises(TypeError, match="arrays: got CuPy"):
        activation("tanhmax")(xp.array(Q), mask=np.ones(Q.shape, dtype=bool))


# --------------------------------------------------------------------------
# The checks bite
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_parity_check_fails_on_a_perturbed_result(dtype, xp, rng):
    want = rng.standard_normal((4, 5)).astype(dtype)
    tol = TOL[np.dtype(dtype)]
    scale = np.max(np.abs(want))
    assert_parity(xp.array(want), want, xp, "identical")
    for factor, fails in ((0.25, False), (4.0, True)):
        bumped = want.copy()
        bumped[2, 3] += dtype(factor * tol * scale)  # one entry, factor x the tolerance
        if fails:
            with pytest.raises(AssertionError, match="differ by"):
                assert_parity(xp.array(bumped), want, xp, "perturbed")
        else:
            assert_parity(xp.array(bumped), want, xp, "within tolerance")
    if dtype == np.float32:  # the rounding allowance: 4 x NumPy's own float32 error
        want64 = want.astype(np.float64)
        want64[1, 1] += 10 * tol * scale  # pretend float32 rounding cost 10 tol here
        allowed = tol * scale + ROUNDING_FACTOR * 10 * tol * scale
        for factor, fails in ((0.9, False), (1.1, True)):
            bumped = want.copy()
            bumped[2, 3] += dtype(factor * allowed)
            if fails:
                with pytest.raises(AssertionError, match="differ by"):
                    assert_parity(xp.array(bumped), want, xp, "perturbed", want64)
            else:
                assert_parity(xp.array(bumped), want, xp, "within tolerance", want64)
    nan = want.copy()
    nan[0, 0] = np.nan
    with pytest.raises(AssertionError, match="differ by"):
        assert_parity(xp.array(nan), want, xp, "NaN")
    other = np.float32 if dtype == np.float64 else np.float64
    with pytest.raises(AssertionError, match="dtype"):
        assert_parity(xp.array(want.astype(other)), want, xp, "dtype")
    with pytest.raises(AssertionError, match="shape"):
        assert_parity(xp.array(want.T.copy()), want.reshape(5, 4), xp, "shape")
    if xp is not np:
        with pytest.raises(AssertionError, match="ndarray"):
            assert_parity(want, want, xp, "a host array where a device array is expected")
    dev = {"x": xp.array(want)}
    dev["x"] += 1.0
    with pytest.raises(AssertionError, match="modified its input"):
        assert_unchanged(dev, {"x": want})


class _HostTanhMax(TanhMax):
    """TanhMax with one line written against NumPy instead of xp (a planted bug)."""

    name = "host_tanhmax"

    def rho(self, s):
        return np.tanh(s)


def test_fake_device_catches_host_code(monkeypatch, rng):
    xp = fake_device.install(monkeypatch)
    s = rng.standard_normal((3, 6))
    d = xp.array(s)
    # the planted bug: fine on NumPy, caught on the fake device
    good, bad = activation("tanhmax"), _HostTanhMax()
    np.testing.assert_array_equal(bad(s), good(s))
    with pytest.raises(fake_device.DeviceHazard, match="numpy.tanh"):
        bad(d)
    assert_parity(good(d), good(s), xp, "tanhmax")
    # each kind of hazard
    with pytest.raises(fake_device.DeviceHazard, match="numpy.exp"):
        np.exp(d)
    with pytest.raises(fake_device.DeviceHazard, match="numpy.where"):
        np.where(d > 0, d, 0.0)
    with pytest.raises(fake_device.DeviceHazard, match="numpy.asarray"):
        np.asarray(d)
    with pytest.raises(TypeError, match="condition must be a device array"):
        xp.where(-np.inf == -np.inf, d, 0.0)  # a Python bool: CuPy's where fails on it
    with pytest.raises(fake_device.DeviceHazard, match="float"):
        float(xp.sum(d))
    with pytest.raises(fake_device.DeviceHazard, match="bool"):
        bool(xp.max(d) > 0)
    with pytest.raises(fake_device.DeviceHazard, match="item"):
        xp.sum(d).item()
    with pytest.raises(TypeError, match="mixed"):
        d * s
    with pytest.raises(TypeError, match="mixed"):
        s + d
    with pytest.raises(TypeError, match="mixed"):
        xp.where(d > 0, s, 0.0)
    # and what is allowed: metadata, scalars, explicit copies both ways
    assert np.shape(d) == s.shape and np.ndim(d) == 2
    np.testing.assert_array_equal(to_numpy(np.float64(2.0) * d - 1.0), 2.0 * s - 1.0)
    assert isinstance(xp.sum(d), xp.ndarray) and xp.sum(d).ndim == 0
    np.testing.assert_array_equal(to_numpy(xp.asarray(s)), s)


# --------------------------------------------------------------------------
# A static check: no NumPy call on array data in the GPU-capable modules
# --------------------------------------------------------------------------

PACKAGE = Path(__file__).resolve().parents[1] / "refattn"
GPU_MODULES = ("core/activations.py", "core/scores.py", "core/attention.py", "training/layers.py",
               "fast/__init__.py", "fast/kernels.py", "fast/streaming.py")

#: NumPy calls that never touch array data, allowed anywhere
NUMPY_METADATA = {
    "shape": "shape only; refattn passes stop_gradient(x), and numpy.shape of a CuPy array is cupy.shape",
    "ndim": "number of dimensions only",
    "dtype": "dtype objects",
    "finfo": "dtype limits",
    "errstate": "NumPy's warning state; no effect on CuPy",
    "broadcast_shapes": "shape tuples",
    "result_type": "dtype promotion, on dtype objects",
}
#: NumPy calls allowed in one function only, on host data made there
NUMPY_ALLOWED_IN = {
    ("_normal", "asarray"): "init_params returns host arrays by design",
    ("_forward_blocked", "broadcast_to"): "the blocked route runs on NumPy arrays only (_block_size)",
    ("_digest", "ascontiguousarray"): "the mask's bytes on the host (to_numpy first), for a digest",
}


def numpy_calls(source):
    """``(line, enclosing function, numpy name)`` for every ``np.<name>(...)`` call."""
    found = []

    def visit(node, func):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        if isinstance(node, ast.Call):
            parts, f = [], node.func
            while isinstance(f, ast.Attribute):
                parts.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name) and f.id in ("np", "numpy") and parts:
                found.append((node.lineno, func, ".".join(reversed(parts))))
        for child in ast.iter_child_nodes(node):
            visit(child, func)

    visit(ast.parse(source), None)
    return found


def disallowed_numpy_calls(source):
    return [(line, func, name) for line, func, name in numpy_calls(source)
            if name not in NUMPY_METADATA and (func, name) not in NUMPY_ALLOWED_IN]


@pytest.mark.parametrize("module", GPU_MODULES)
def test_no_numpy_calls_on_array_data(module):
    bad = disallowed_numpy_calls((PACKAGE / module).read_text())
    assert not bad, (
        f"refattn/{module}: NumPy called where xp is needed (line, function, call): {bad}; "
        "use xp = array_module(...), or add the call to NUMPY_METADATA / NUMPY_ALLOWED_IN "
        "with the reason it never touches array data"
    )


def test_static_check_catches_a_numpy_call():
    planted = (
        "def rho(self, s):\n"
        "    xp = array_module(s)\n"
        "    a = np.shape(s)\n"
        "    return np.tanh(s) * xp.ones(a)\n"
        "def _normal(n):\n"
        "    return np.asarray(n) + np.linalg.norm(n)\n"
    )
    assert disallowed_numpy_calls(planted) == [(4, "rho", "tanh"), (6, "_normal", "linalg.norm")]


# --------------------------------------------------------------------------
# The GPU benchmark script, on the CPU
# --------------------------------------------------------------------------


def _load_bench():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu_attention.py"
    spec = importlib.util.spec_from_file_location("bench_gpu_attention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _close(a, b):
    return abs(a - b) <= 1e-12 * abs(b)


def test_benchmark_tiny_run_writes_sane_json(tmp_path, capsys):
    import json
    import statistics

    bench = _load_bench()
    out = tmp_path / "sub" / "bench.json"
    bench.main(["--size", "tiny", "--out", str(out)])
    printed = capsys.readouterr().out
    res = json.loads(out.read_text())
    cfg = bench.SIZES["tiny"]
    assert res["schema"] == bench.SCHEMA and res["size"] == "tiny" and res["complete"] is True
    assert tuple(res["shape"].values()) == cfg["shape"]
    assert res["machine"]["numpy"] == np.__version__
    assert res["backends"]["numpy"]["ran"] is True
    # CPU-only size: CuPy never runs, and says why
    assert res["backends"]["cupy"]["ran"] is False and "CPU-only" in res["backends"]["cupy"]["reason"]
    try:
        import torch  # noqa: F401
        has_torch = True
    except ImportError:
        has_torch = False
    assert res["backends"]["torch"]["ran"] is has_torch
    assert [(r["activation"], r["dtype"]) for r in res["rows"]] == [
        (a, d) for d in ("float32", "float64") for a in ACTIVATIONS]
    for r in res["rows"]:
        assert len(r["numpy_times_ms"]) == cfg["cpu_repeats"]
        assert all(np.isfinite(t) and t > 0 for t in r["numpy_times_ms"])
        assert r["numpy_ms"] == statistics.median(r["numpy_times_ms"])
        assert r["cupy_ms"] is None and r["cupy_over_torch"] is None and r["numpy_over_cupy"] is None
        if has_torch:
            t = res["torch_softmax"][r["dtype"]]
            assert r["torch_softmax_ms"] == t["ms"] == statistics.median(t["times_ms"]) > 0
            f = res["torch_sdpa"][r["dtype"]]
            assert r["torch_sdpa_ms"] == f["ms"] == statistics.median(f["times_ms"]) > 0
            assert _close(r["numpy_over_torch"], r["numpy_ms"] / r["torch_softmax_ms"])
            assert r["cupy_over_sdpa"] is None
    if has_torch:  # PyTorch's softmax attention and refattn's compute the same thing
        for key in ("torch_softmax", "torch_sdpa"):
            assert res[key]["float64"]["max_rel_vs_numpy_softmax"] < 1e-12
            assert res[key]["float32"]["max_rel_vs_numpy_softmax"] < 1e-5
    # the markdown table: a header, a rule, one line per row, the reasons
    table = bench.format_attention_bench(res)
    assert table in printed
    lines = [ln for ln in table.splitlines() if ln.startswith("|")]
    assert len(lines) == 2 + len(res["rows"])
    assert "| tanhmax | float64 |" in table and "cupy: not run" in table


def test_benchmark_cupy_column_on_the_fake_device(monkeypatch):
    """The CuPy column's code path (device copies, synchronised timing, ratios,
    the parity check against NumPy), run on the fake device."""
    import json
    import types

    bench = _load_bench()
    fxp = fake_device.install(monkeypatch)
    syncs = []
    device = types.SimpleNamespace(id=0, compute_capability="00",
                                   synchronize=lambda: syncs.append(1))
    fake_cupy = types.SimpleNamespace(
        __version__="fake", asarray=fxp.asarray,
        get_default_memory_pool=lambda: types.SimpleNamespace(free_all_blocks=lambda: None),
        cuda=types.SimpleNamespace(
            Device=lambda: device,
            runtime=types.SimpleNamespace(
                getDeviceProperties=lambda i: {"name": b"fake device", "totalGlobalMem": 2**30},
                runtimeGetVersion=lambda: 0, driverGetVersion=lambda: 0)))
    monkeypatch.setattr(bench, "_cupy_status", lambda gpu: (fake_cupy, None))
    res = bench.run_attention_bench("tiny", dtypes=("float64",), activations=("softmax", "signexp"),
                                    warmup=1, repeats=4)
    json.dumps(res)  # JSON-serialisable
    assert res["backends"]["cupy"] == {"ran": True, "device": "cuda"}
    assert res["machine"]["gpu"]["name"] == "fake device"
    assert len(syncs) == 2 * 4 * 2  # before and after each timed run, 4 runs, 2 rows
    for r in res["rows"]:
        assert len(r["cupy_times_ms"]) == 4 and r["cupy_ms"] > 0
        assert _close(r["numpy_over_cupy"], r["numpy_ms"] / r["cupy_ms"])
        if r["torch_softmax_ms"] is not None:
            assert _close(r["cupy_over_torch"], r["cupy_ms"] / r["torch_softmax_ms"])
            assert _close(r["cupy_over_sdpa"], r["cupy_ms"] / r["torch_sdpa_ms"])
        assert r["cupy_max_rel_vs_numpy"] <= 1e-12
    assert "| signexp | float64 |" in bench.format_attention_bench(res)


def test_benchmark_rejects_bad_options():
    bench = _load_bench()
    with pytest.raises(ValueError, match="size"):
        bench.run_attention_bench("huge")
    with pytest.raises(ValueError, match="activations"):
        bench.run_attention_bench("tiny", activations=("nope",))
    with pytest.raises(ValueError, match="dtypes"):
        bench.run_attention_bench("tiny", dtypes=("float16",))
    with pytest.raises(ValueError, match="repeats"):
        bench.run_attention_bench("tiny", repeats=0)
    with pytest.raises(ValueError, match="shape"):
        bench.run_attention_bench("tiny", shape=(1, 2, 3))


def test_benchmark_runs_without_torch(monkeypatch):
    import sys

    bench = _load_bench()
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    res = bench.run_attention_bench("tiny", dtypes=("float32",), activations=("softmax", "relu"))
    assert res["backends"]["torch"] == {
        "ran": False, "device": None, "what": res["backends"]["torch"]["what"],
        "reason": "not run: PyTorch is not installed"}
    assert res["torch_softmax"] == res["torch_sdpa"] == {}
    for r in res["rows"]:
        assert r["numpy_ms"] > 0
        assert r["torch_softmax_ms"] is None and r["torch_sdpa_ms"] is None and r["numpy_over_torch"] is None
    assert "torch: not run: PyTorch is not installed" in bench.format_attention_bench(res)
