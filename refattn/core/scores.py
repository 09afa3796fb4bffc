r"""Score functions: how the scores ``s`` are made from queries and keys (``derivations/02-scores.md``).

TanhMax (Eq. 1) writes a score as ``s_i = f(Q_i, K_i)`` and leaves ``f``
open; the activation (:mod:`refattn.core.activations`) then turns scores into
weights. Here is the ``f`` of every paper and baseline, each forward with its
hand-derived backward right under it:

============ ======== ==================================================== ===================
name         pairwise s                                                    params
============ ======== ==================================================== ===================
dot          yes      s_ij = q_i . k_j                                     --
scaled_dot   yes      s_ij = beta q_i . k_j,  beta = 1/sqrt(d)             --
additive     yes      s_ij = v . tanh(W_q q_i + W_k k_j)                   W_q, W_k, v
self         no       s_i  = q_i . k_i / scale,  scale = sqrt(d)           --
global       no       s_i  = k_i . v / lam                                 v
neural       yes      s_ij = beta (wa . sigma(Whq q'_i + Whk k'_j + bh)    Wq, Wk, Whq, Whk,
                             + ba),  q' = Wq q, k' = Wk k                  bh, wa, ba
cosformer    yes      s_ij = relu(q_i) . relu(k_j) cos(pi (i - j) / 2M)    --
============ ======== ==================================================== ===================

Shapes: ``q (..., n_q, d)``, ``k (..., n_k, d)``, leading (batch, head) axes
broadcast; ``s (..., n_q, n_k)``, or ``s (..., n)`` for a per-token score,
which pairs token ``i`` with itself. Parameters have no batch axes.
``s, cache = sc.forward(q, k, params)``, ``dq, dk, dparams = sc.backward(ds, cache)``;
``sc(q, k, params)`` is the scores alone; ``@checks.score_forward`` and
``@checks.score_backward`` check the arguments. relu has slope 0 at 0.
"""

from __future__ import annotations

import math

import numpy as np

from . import checks
from .backend import array_module, dtype_of, shape_of, sum_to

__all__ = ["Score", "SCORES", "score", "register"]

_REGISTRY: dict = {}  # name -> the class


def register(cls):
    """Class decorator: ``score(cls.name, **options)`` returns ``cls(**options)``."""
    _REGISTRY[cls.name] = cls
    return cls


def relu(xp, x):
    return xp.where(x <= 0, 0.0, x)  # slope 0 at 0; NaN stays NaN


RELU_KINK = "relu kink: relu'(0) = 0 by convention; differences see 1/2"


def step(xp, x):
    """relu'(x), with relu'(0) = 0, in x's dtype."""
    return xp.where(x > 0, 1.0, xp.zeros_like(x))


def transpose_last(xp, x):
    """``x^T`` for a batch of matrices: the last two axes swapped."""
    return xp.swapaxes(x, -1, -2)


class Score:
    """A score function ``s = f(q, k; params)`` and its hand-derived backward.

    ``pairwise`` (else one score per token), ``uses_q`` (``global`` reads no query),
    ``option_names`` (``score(name, **options)``), ``size_names`` (``init_params``),
    ``singular`` (``(where, why)`` for each point where the score is not differentiable).
    """

    name = source = ""
    pairwise, uses_q = True, True
    option_names: tuple = ()
    size_names: tuple = ()
    singular: tuple = ()

    def param_spec(self, params) -> dict:
        """Each parameter's shape in symbols, e.g. ``{"v": ("d_a",)}`` (``d, n_q, n_k`` from q and k)."""
        return {}

    def init_params(self, d, rng, dtype=np.float64, **sizes) -> dict:
        """Random parameters for feature size ``d`` (``{}`` for a score without any)."""
        checks.init_args(self, d, rng, dtype, sizes)
        return {k: v.astype(dtype) for k, v in self._init(d, rng, **sizes).items()}

    def _init(self, d, rng, **sizes) -> dict:
        return {}

    def __call__(self, q, k, params=None):
        """The scores alone: ``forward(q, k, params)[0]``."""
        return self.forward(q, k, params)[0]

    def __repr__(self):
        return f"score({self.name!r}" + "".join(f", {n}={getattr(self, n)!r}" for n in self.option_names) + ")"


def _normal(rng, shape, fan_in):
    return np.asarray(rng.standard_normal(shape) / math.sqrt(fan_in))


@register
class Dot(Score):
    """Dot-product score, ``S = beta Q K^T``, ``beta = 1`` (Luong 2015; NeuralAttn Eq. 2; derivation 02, section 2)."""

    name, source = "dot", "Luong et al. (2015) 'dot'; Vaswani et al. (2017) Eq. 1 unscaled; NeuralAttn Eq. 2"

    def beta_for(self, d):
        return 1.0

    @checks.score_forward
    def forward(self, q, k, params=None):
        xp, beta = array_module(q, k), self.beta_for(shape_of(k)[-1])
        s = (beta * q) @ transpose_last(xp, k)  # (..., n_q, n_k)   s_ij = beta q_i . k_j
        return s, {"q": q, "k": k, "beta": beta}

    @checks.score_backward
    def backward(self, grad_s, cache):
        q, k, beta, G = cache["q"], cache["k"], cache["beta"], grad_s
        xp = array_module(q, k, G)
        dq = beta * (G @ k)  # (..., n_q, d)   ds_ij/dq_i = beta k_j
        dk = beta * (transpose_last(xp, G) @ q)  # (..., n_k, d)   ds_ij/dk_j = beta q_i
        return sum_to(xp, dq, shape_of(q)), sum_to(xp, dk, shape_of(k)), {}


@register
class ScaledDot(Dot):
    """Scaled dot-product score, ``S = beta Q K^T``, ``beta = 1/sqrt(d)`` unless given (Vaswani et al. 2017
    Eq. 1; derivation 02, section 3)."""

    name, source = "scaled_dot", "Vaswani et al. (2017) Eq. 1; NeuralAttn Eq. 1"
    option_names = ("beta",)

    def __init__(self, beta=None):
        self.beta = checks.check_real(beta, "beta", positive=True, allow_none=True)

    def beta_for(self, d):
        return 1.0 / math.sqrt(d) if self.beta is None else self.beta


def _pair_mlp(xp, a, b, bias, w, hidden):
    """``t_ij = w . sigma(a_ij + b_ij + bias)``, the pair MLP of ``additive`` and ``neural``.

    ``a`` is ``(..., n_q, 1, h)`` (one per query) and ``b`` ``(..., 1, n_k, h)``
    (one per key), or both per pair ``(..., n_q, n_k, h)``; only the hidden
    pre-activation ``z`` is pair-sized. Returns ``(t, sigma(z))``: the
    backward pass needs ``sigma(z)`` only, so ``z`` is freed here.
    """
    z = a + b if bias is None else (a + bias) + b  # (..., n_q, n_k, h); a shared bias joins the small half
    hz = xp.tanh(z) if hidden == "tanh" else relu(xp, z)  # (..., n_q, n_k, h)
    return (hz @ w if len(shape_of(w)) == 1 else xp.sum(hz * w, axis=-1)), hz  # (..., n_q, n_k)


def _pair_mlp_backward(xp, G, hz, w, hidden):
    """``(gz, dw)``: the gradient of the pre-activation ``z`` and of ``w``, for ``dt = G``."""
    dsigma = 1.0 - hz * hz if hidden == "tanh" else step(xp, hz)  # tanh' = 1 - tanh^2; relu' = [z > 0] = [relu(z) > 0]
    gz = G[..., None] * w * dsigma  # (..., n_q, n_k, h)   dt/dz = w sigma'(z)
    return gz, sum_to(xp, G[..., None] * hz, shape_of(w))  # dt/dw = sigma(z)


@register
class Additive(Score):
    """Additive score, ``s_ij = v . tanh(W_q q_i + W_k k_j)`` (Bahdanau 2015; derivation 02, section 4).

    ``W_q, W_k (d_a, d)``, ``v (d_a,)`` (init size ``d_a``, default ``d``):
    the pair MLP of ``neural`` without biases, with tanh.
    """

    name, source = "additive", "Bahdanau, Cho & Bengio (2015), Appendix A.1.2; NeuralAttn section 2"
    size_names = ("d_a",)

    def param_spec(self, params):
        return {"W_q": ("d_a", "d"), "W_k": ("d_a", "d"), "v": ("d_a",)}

    def _init(self, d, rng, d_a=None):
        d_a = d if d_a is None else checks.check_int(d_a, "d_a", 1)
        return {"W_q": _normal(rng, (d_a, d), d), "W_k": _normal(rng, (d_a, d), d), "v": _normal(rng, d_a, d_a)}

    @checks.score_forward
    def forward(self, q, k, params=None):
        xp = array_module(q, k, *params.values())
        a = q @ transpose_last(xp, params["W_q"])  # (..., n_q, d_a)   A = Q W_q^T
        b = k @ transpose_last(xp, params["W_k"])  # (..., n_k, d_a)   B = K W_k^T
        s, hz = _pair_mlp(xp, a[..., :, None, :], b[..., None, :, :], None, params["v"], "tanh")
        return s, {"q": q, "k": k, "params": params, "hz": hz}  # s: (..., n_q, n_k)

    @checks.score_backward
    def backward(self, grad_s, cache):
        q, k, P = cache["q"], cache["k"], cache["params"]
        xp = array_module(q, k, grad_s, *P.values())
        gz, dv = _pair_mlp_backward(xp, grad_s, cache["hz"], P["v"], "tanh")
        da, db = xp.sum(gz, axis=-2), xp.sum(gz, axis=-3)  # (..., n_q, d_a), (..., n_k, d_a)  z_ij = A_i + B_j
        dW_q = sum_to(xp, transpose_last(xp, da) @ q, shape_of(P["W_q"]))  # (d_a, d)   dW_q = dA^T Q
        dW_k = sum_to(xp, transpose_last(xp, db) @ k, shape_of(P["W_k"]))  # (d_a, d)
        dq, dk = sum_to(xp, da @ P["W_q"], shape_of(q)), sum_to(xp, db @ P["W_k"], shape_of(k))  # dQ = dA W_q
        return dq, dk, {"W_q": dW_q, "W_k": dW_k, "v": dv}


@register
class SameToken(Score):
    """Per-token score, ``s_i = q_i . k_i / scale``, ``scale = sqrt(d)`` unless given (TanhMax Eq. 1;
    derivation 02, section 6): query and key from the same token, as in TanhMax's public code."""

    name, source = "self", "TanhMax Eq. 1 with f(Q_i, K_i) = Q_i . K_i / sqrt(d), as in its public code"
    pairwise = False
    option_names = ("scale",)

    def __init__(self, scale=None):
        self.scale = checks.check_real(scale, "scale", positive=True, allow_none=True)

    @checks.score_forward
    def forward(self, q, k, params=None):
        c = math.sqrt(shape_of(k)[-1]) if self.scale is None else self.scale
        return array_module(q, k).sum(q * k, axis=-1) / c, {"q": q, "k": k, "scale": c}  # (..., n)

    @checks.score_backward
    def backward(self, grad_s, cache):
        q, k = cache["q"], cache["k"]
        xp, g = array_module(q, k, grad_s), grad_s[..., None] / cache["scale"]  # (..., n, 1)
        return sum_to(xp, g * k, shape_of(q)), sum_to(xp, g * q, shape_of(k)), {}  # ds_i/dq_i = k_i / scale


@register
class Global(Score):
    """Per-token score with one learned query, ``s_i = k_i . v / lam``, ``lam = 10`` (Sun & Lu 2020;
    derivation 02, section 7). ``q`` is not read and may be ``None``; ``v (d,)`` is shared by every token."""

    name, source = "global", "Sun & Lu (2020), attention score h_i^T V / lambda with a learned global V"
    pairwise, uses_q = False, False
    option_names = ("lam",)

    def __init__(self, lam=10.0):
        self.lam = checks.check_real(lam, "lam", positive=True)

    def param_spec(self, params):
        return {"v": ("d",)}

    def _init(self, d, rng):
        return {"v": _normal(rng, d, d)}

    @checks.score_forward
    def forward(self, q, k, params=None):
        return (k @ params["v"]) / self.lam, {"k": k, "v": params["v"]}  # (..., n)

    @checks.score_backward
    def backward(self, grad_s, cache):
        k, v = cache["k"], cache["v"]
        xp, g = array_module(k, v, grad_s), grad_s / self.lam  # (..., n)
        dv = sum_to(xp, g[..., None, :] @ k, (1, shape_of(v)[0]))[0]  # (d,)   ds_i/dv = k_i / lam
        return None, g[..., None] * v, {"v": dv}  # ds_i/dk_i = v / lam


@register
class Neural(Score):
    """Neural Attention (NeuralAttn Eqs. 3-9; derivation 02, section 5): a small MLP of each (query, key) pair.

    ``s_ij = beta (wa . sigma(W_h [q'_i; k'_j] + bh) + ba)``, ``q' = Wq q``, ``k' = Wk k`` (Eqs. 5-6),
    ``beta = 1/sqrt(d)`` (Eq. 9). As ``W_h [q'; k'] = Whq q' + Whk k'``, Eq. 7's ``n x n x 2d'``
    concatenation never exists. Shared weights (the authors' code, default): ``Whq, Whk (h, d')``,
    ``bh, wa (h,)``, ``ba ()``; per-pair (Eq. 8, ``init_params(..., per_pair=(n_q, n_k))``): the same
    with ``(n_q, n_k)`` in front. Options ``hidden`` (tanh or relu; the paper leaves sigma open) and
    ``beta``; init sizes ``d_prime`` (default ``min(d, 8)``), ``hidden_size`` (16), ``per_pair``.
    """

    name, source = "neural", "Neural Attention (NeuralAttn), Eqs. 3-9 and Algorithm 1"
    option_names = ("hidden", "beta")
    size_names = ("d_prime", "hidden_size", "per_pair")

    def __init__(self, hidden="tanh", beta=None):
        if hidden not in ("tanh", "relu"):
            raise ValueError(f"hidden: expected one of ('tanh', 'relu'), got {hidden!r}")
        self.hidden = hidden
        self.beta = checks.check_real(beta, "beta", positive=True, allow_none=True)

    def beta_for(self, d):
        return 1.0 / math.sqrt(d) if self.beta is None else self.beta

    @property
    def singular(self):
        return (("hidden pre-activation z = 0", RELU_KINK),) if self.hidden == "relu" else ()

    @staticmethod
    def is_per_pair(params):
        return len(shape_of(params["Whq"])) == 4 if "Whq" in params else False

    def param_spec(self, params):
        pair = ("n_q", "n_k") if self.is_per_pair(params) else ()
        return {"Wq": ("d'", "d"), "Wk": ("d'", "d"), "Whq": pair + ("h", "d'"), "Whk": pair + ("h", "d'"),
                "bh": pair + ("h",), "wa": pair + ("h",), "ba": pair}

    def _init(self, d, rng, d_prime=None, hidden_size=16, per_pair=None):
        dp = min(d, 8) if d_prime is None else checks.check_int(d_prime, "d_prime", 1)
        h = checks.check_int(hidden_size, "hidden_size", 1)
        pair = ()
        if per_pair is not None:
            if not (isinstance(per_pair, (tuple, list)) and len(per_pair) == 2):
                raise ValueError(f"per_pair: expected (n_q, n_k) or None, got {per_pair!r}")
            pair = tuple(checks.check_int(n, f"per_pair[{i}]", 1) for i, n in enumerate(per_pair))
        # W_h = [Whq Whk] has fan-in 2d'; biases small but nonzero
        return {"Wq": _normal(rng, (dp, d), d), "Wk": _normal(rng, (dp, d), d),
                "Whq": _normal(rng, pair + (h, dp), 2 * dp), "Whk": _normal(rng, pair + (h, dp), 2 * dp),
                "bh": _normal(rng, pair + (h,), 100.0), "wa": _normal(rng, pair + (h,), h),
                "ba": _normal(rng, pair, 100.0)}

    @checks.score_forward
    def forward(self, q, k, params=None):
        P = params
        xp = array_module(q, k, *P.values())
        qp = q @ transpose_last(xp, P["Wq"])  # (..., n_q, d')   Eq. 5
        kp = k @ transpose_last(xp, P["Wk"])  # (..., n_k, d')   Eq. 6
        if self.is_per_pair(P):
            a = xp.einsum("ijhe,...ie->...ijh", P["Whq"], qp)  # (..., n_q, n_k, h)
            b = xp.einsum("ijhe,...je->...ijh", P["Whk"], kp)  # (..., n_q, n_k, h)
        else:
            a = (qp @ transpose_last(xp, P["Whq"]))[..., :, None, :]  # (..., n_q, 1, h)   Whq q'_i
            b = (kp @ transpose_last(xp, P["Whk"]))[..., None, :, :]  # (..., 1, n_k, h)   Whk k'_j
        t, hz = _pair_mlp(xp, a, b, P["bh"], P["wa"], self.hidden)  # (..., n_q, n_k)   Eqs. 4, 8
        beta = self.beta_for(shape_of(k)[-1])
        return beta * (t + P["ba"]), {"q": q, "k": k, "params": P, "qp": qp, "kp": kp, "hz": hz,
                                      "beta": beta}  # Eq. 9

    @checks.score_backward
    def backward(self, grad_s, cache):
        q, k, P, qp, kp = (cache[n] for n in ("q", "k", "params", "qp", "kp"))
        xp = array_module(q, k, grad_s, *P.values())
        G = cache["beta"] * grad_s  # (..., n_q, n_k)
        gz, dwa = _pair_mlp_backward(xp, G, cache["hz"], P["wa"], self.hidden)  # (..., n_q, n_k, h)
        d = {"ba": sum_to(xp, G, shape_of(P["ba"])), "bh": sum_to(xp, gz, shape_of(P["bh"])), "wa": dwa}
        if self.is_per_pair(P):  # z_ij = Whq[i, j] q'_i + Whk[i, j] k'_j + bh[i, j]
            d["Whq"] = sum_to(xp, gz[..., None] * qp[..., :, None, None, :], shape_of(P["Whq"]))  # (n_q, n_k, h, d')
            d["Whk"] = sum_to(xp, gz[..., None] * kp[..., None, :, None, :], shape_of(P["Whk"]))
            dqp = xp.einsum("...ijh,ijhe->...ie", gz, P["Whq"])  # (..., n_q, d')
            dkp = xp.einsum("...ijh,ijhe->...je", gz, P["Whk"])  # (..., n_k, d')
        else:  # z_ij = a_i + b_j + bh:  da_i = sum_j gz_ij,  db_j = sum_i gz_ij
            da, db = xp.sum(gz, axis=-2), xp.sum(gz, axis=-3)  # (..., n_q, h), (..., n_k, h)
            d["Whq"] = sum_to(xp, transpose_last(xp, da) @ qp, shape_of(P["Whq"]))  # (h, d')
            d["Whk"] = sum_to(xp, transpose_last(xp, db) @ kp, shape_of(P["Whk"]))
            dqp, dkp = da @ P["Whq"], db @ P["Whk"]  # (..., n_q, d'), (..., n_k, d')
        d["Wq"] = sum_to(xp, transpose_last(xp, dqp) @ q, shape_of(P["Wq"]))  # (d', d)   q' = Wq q
        d["Wk"] = sum_to(xp, transpose_last(xp, dkp) @ k, shape_of(P["Wk"]))
        dq, dk = sum_to(xp, dqp @ P["Wq"], shape_of(q)), sum_to(xp, dkp @ P["Wk"], shape_of(k))
        return dq, dk, {n: d[n] for n in P}


@register
class CosFormer(Score):
    """cosFormer score, ``s_ij = relu(q_i) . relu(k_j) cos(pi (i - j) / 2M)`` (Qin et al. 2022, section 3;
    derivation 02, section 9). ``M`` defaults to ``max(n_q, n_k)``; a smaller one is refused."""

    name = "cosformer"
    source = "Qin et al. (2022; TanhMax cites it as 'Zhen et al.'), cosFormer, relu kernel with cos re-weighting"
    option_names = ("M",)
    singular = (("q or k entry = 0", RELU_KINK),)

    def __init__(self, M=None):
        self.M = checks.check_real(M, "M", positive=True, allow_none=True)

    def weights(self, xp, rows, cols, n, dtype):
        """``C_ij = cos(pi (i - j) / 2M)`` for query positions ``rows`` and key positions ``cols``."""
        M = float(n) if self.M is None else self.M
        if M < n:
            raise ValueError(f"M: {M:g} is smaller than the sequence length {n}; cos(pi (i - j) / 2M) "
                             f"would turn negative (cosFormer needs M >= n)")
        i = xp.arange(rows.start, rows.stop, dtype=dtype)[:, None]  # (n_q, 1)   positions, in the scores' dtype
        j = xp.arange(cols.start, cols.stop, dtype=dtype)[None, :]  # (1, n_k)
        return xp.cos((np.pi / (2.0 * M)) * (i - j))  # (n_q, n_k)

    @checks.score_forward
    def forward(self, q, k, params=None):
        xp = array_module(q, k)
        (n_q, _), (n_k, _) = shape_of(q)[-2:], shape_of(k)[-2:]
        C = self.weights(xp, range(n_q), range(n_k), max(n_q, n_k), dtype_of(q))  # (n_q, n_k)
        return (relu(xp, q) @ transpose_last(xp, relu(xp, k))) * C, {"q": q, "k": k, "C": C}  # (..., n_q, n_k)

    @checks.score_backward
    def backward(self, grad_s, cache):
        q, k = cache["q"], cache["k"]
        xp = array_module(q, k, grad_s)
        G = grad_s * cache["C"]  # (..., n_q, n_k)
        dq = (G @ relu(xp, k)) * step(xp, q)  # (..., n_q, d)   ds_ij/dq_i = C_ij relu(k_j) relu'(q_i)
        dk = (transpose_last(xp, G) @ relu(xp, q)) * step(xp, k)  # (..., n_k, d)
        return sum_to(xp, dq, shape_of(q)), sum_to(xp, dk, shape_of(k)), {}


#: The built-in scores, in registry order.
SCORES = tuple(_REGISTRY)


def score(name: str, **options) -> Score:
    """The score called ``name``, configured with its ``options`` (``Score.option_names``)."""
    if not isinstance(name, str):
        raise TypeError(f"name: expected a string, got {type(name).__name__}")
    if name not in _REGISTRY:
        raise ValueError(f"name: unknown score {name!r}; expected one of {SCORES}")
    cls = _REGISTRY[name]
    for option in options:
        if option not in cls.option_names:
            takes = f"one of {cls.option_names}" if cls.option_names else "no options"
            raise TypeError(f"{option}: unknown option for score {name!r}; it takes {takes}")
    return cls(**options)
