"""The API as it is misused: inputs changed in place between forward and backward, NumPy subclasses,
and every dtype the reference accepts, on each path (the reference, the fast path, streaming).

What each path promises (its docstrings say so): the reference's and the fast path's caches keep
copies of ``Q, K, V``, the score's parameters (and the fast path the mask), so changing an input in
place after forward changes no gradient; an activation's cache holds forward's own scores; the
streaming path copies ``Q, K, V`` and the parameters and keeps the mask (an n x n array it never
doubles) with a digest, so that a mask changed in place is refused in backward, never used."""

import itertools

import numpy as np
import pytest

import refattn
from refattn import fast
from refattn.fast.streaming import streaming_attention, streaming_attention_backward

pytestmark = pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")

PATHS = {"reference": (refattn.attention, refattn.attention_backward),
         "fast": (fast.attention, fast.attention_backward),
         "streaming": (streaming_attention, streaming_attention_backward)}


def _inputs(rng, score):
    Q, K, V = (rng.standard_normal((2, 7, 3)) for _ in range(3))
    params = refattn.score(score).init_params(3, np.random.default_rng(1)) if score == "neural" else None
    mask = rng.random((2, 7, 7)) > 0.25
    return Q, K, V, params, mask


def _copies(Q, K, V, params, mask):
    return Q.copy(), K.copy(), V.copy(), None if params is None else {k: v.copy() for k, v in params.items()}, \
        mask.copy()


MUTATIONS = {
    "Q": lambda Q, K, V, P, m: Q.__iadd__(1.0),
    "K": lambda Q, K, V, P, m: K.__imul__(-2.0),
    "V": lambda Q, K, V, P, m: V.__iadd__(1.0),
    "params": lambda Q, K, V, P, m: [v.__iadd__(0.5) for v in P.values()],
    "mask": lambda Q, K, V, P, m: m.__setitem__(..., True),
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("score", ["scaled_dot", "neural"])
@pytest.mark.parametrize("changed", list(MUTATIONS))
def test_an_input_changed_in_place_between_forward_and_backward(path, score, changed):
    """The reproduction: inputs changed in place between forward and backward gave silently wrong
    gradients, differently on each path. Now the gradients are those of the inputs forward saw, or
    (streaming's mask) a refusal naming the argument."""
    if changed == "params" and score != "neural":
        pytest.skip("the dot score has no parameters")
    forward, backward = PATHS[path]
    rng = np.random.default_rng(7)
    inputs = _inputs(rng, score)
    kw = lambda Q, K, V, P, m: dict(score=score, activation="tanhmax", params=P, mask=m)  # noqa: E731
    clean = _copies(*inputs)
    out, _ = forward(*clean[:3], **kw(*clean))
    G = rng.standard_normal(out.shape)
    expected = backward(G, forward(*clean[:3], **kw(*clean))[1])
    mine = _copies(*inputs)
    _, cache = forward(*mine[:3], **kw(*mine))
    MUTATIONS[changed](*mine)
    if path == "streaming" and changed == "mask":
        with pytest.raises(ValueError, match="^mask: it was changed in place after streaming_attention"):
            backward(G, cache)
        return
    got = backward(G, cache)
    for e, g in zip(expected[:3], got[:3]):
        np.testing.assert_array_equal(e, g)
    assert set(expected[3]) == set(got[3]) and all(np.array_equal(expected[3][k], got[3][k]) for k in got[3])


def test_an_activation_and_a_score_keep_what_their_backward_reads():
    rng = np.random.default_rng(3)
    act, sc = refattn.activation("tanhmax"), refattn.score("neural")
    s = rng.standard_normal((4, 5))
    mine = s.copy()
    phi, cache = act.forward(mine)
    u = rng.standard_normal(phi.shape)
    mine += 3.0
    np.testing.assert_array_equal(act.backward(u, cache), act.backward(u, act.forward(s)[1]))
    q, k = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    params = sc.init_params(3, np.random.default_rng(0))
    args = (q.copy(), k.copy(), {n: v.copy() for n, v in params.items()})
    out, cache = sc.forward(*args)
    G = rng.standard_normal(out.shape)
    for a in args[:2]:
        a *= -1.0
    for v in args[2].values():
        v += 1.0
    expected = sc.backward(G, sc.forward(q, k, params)[1])
    got = sc.backward(G, cache)
    np.testing.assert_array_equal(expected[0], got[0])
    np.testing.assert_array_equal(expected[1], got[1])
    assert all(np.array_equal(expected[2][n], got[2][n]) for n in params)


SUBCLASSES = {"numpy.matrix": np.asmatrix, "a masked array": np.ma.masked_array}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("kind", list(SUBCLASSES))
@pytest.mark.parametrize("argument", ["Q", "K", "V", "mask"])
def test_numpy_subclasses_are_refused_in_one_line_naming_the_argument(path, kind, argument):
    """The reproduction: NumPy matrices and masked arrays failed deep inside (or, for a masked
    array, silently ignored its mask)."""
    rng = np.random.default_rng(0)
    arrays = {"Q": rng.standard_normal((4, 3)), "K": rng.standard_normal((4, 3)), "V": rng.standard_normal((4, 3)),
              "mask": np.ones((4, 4), bool)}
    arrays[argument] = SUBCLASSES[kind](arrays[argument])
    forward = PATHS[path][0]
    with pytest.raises(TypeError) as refused:
        forward(arrays["Q"], arrays["K"], arrays["V"], mask=arrays["mask"])
    message = refused.value.args[0]
    assert message.startswith(f"{argument}: {kind}"), message
    assert "\n" not in message


def test_activations_scores_and_gradients_refuse_subclasses_too():
    m = np.asmatrix(np.ones((3, 3)))
    with pytest.raises(TypeError, match="^s: numpy.matrix"):
        refattn.activation("softmax").forward(m)
    with pytest.raises(TypeError, match="^q: a masked array"):
        refattn.score("dot").forward(np.ma.masked_array(np.ones((3, 2))), np.ones((3, 2)))
    _, cache = refattn.activation("softmax").forward(np.ones((3, 3)))
    with pytest.raises(TypeError, match="^grad_phi: numpy.matrix"):
        refattn.activation("softmax").backward(m, cache)


DTYPES = [np.float16, np.float32, np.float64, np.longdouble, np.dtype(">f8")]


@pytest.mark.parametrize("forward_dtype, grad_dtype", list(itertools.product(DTYPES, DTYPES)),
                         ids=lambda d: np.dtype(d).str)
@pytest.mark.parametrize("path", ["fast", "streaming"])
def test_every_dtype_the_reference_accepts_runs_forward_and_backward_on_every_path(path, forward_dtype, grad_dtype):
    """The reproduction: streaming's fast route failed in backward ("could not be cast from float128")
    for a float128 upstream gradient after a float32 or float64 forward."""
    rng = np.random.default_rng(5)
    Q, K, V = (rng.standard_normal((2, 6, 3)).astype(forward_dtype) for _ in range(3))
    forward, backward = PATHS[path]
    ref_out, ref_cache = refattn.attention(Q, K, V, activation="tanhmax")
    G = rng.standard_normal(ref_out.shape).astype(grad_dtype)
    ref = refattn.attention_backward(G, ref_cache)
    with np.errstate(all="ignore"):
        out, cache = forward(Q, K, V, activation="tanhmax")
        got = backward(G, cache)
    # to the rounding of the coarser of the two dtypes, a few dozen operations deep
    tol = 64 * max(np.finfo(forward_dtype).eps, np.finfo(grad_dtype).eps)
    assert out.dtype == ref_out.dtype
    np.testing.assert_allclose(out.astype(np.float64), ref_out.astype(np.float64), rtol=tol, atol=tol)
    for r, g in zip(ref[:3], got[:3]):
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g.astype(np.float64), r.astype(np.float64), rtol=tol, atol=tol * np.abs(r).max())
