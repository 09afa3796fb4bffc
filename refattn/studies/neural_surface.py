r"""What a score MLP can represent that a dot product cannot (NeuralAttn, section 1.2).

NeuralAttn compares the dot-product score ``z = q . k`` (its Eq. 2) with the
Neural Attention score, a one-hidden-layer MLP of the concatenated pair
(its Eqs. 3-4),

    z = wa . sigma(W_h [q; k] + bh) + ba,

and pictures both on the *diagonal* ``q = k = (x, y)`` (its Fig. 1): the dot
product gives the paraboloid ``x^2 + y^2``; the MLP, a learned surface.

This module provides

* :func:`diagonal_surface`: ``z(x, y)`` of any registered pairwise score on
  that diagonal;
* :func:`fit_relation`: a regression of a query-key relation that is not
  bilinear (default: the RBF similarity ``exp(-|q - k|^2 / (2 r^2))``),
  fitted (a) by the best bilinear score ``q^T A k + b``, by exact linear least
  squares (:func:`fit_bilinear`), which covers every dot product of linear
  projections ``(W_q q) . (W_k k)``, and (b) by the library's ``neural``
  score trained with its own hand-derived VJP and :class:`refattn.training.optim.Adam`.

The MLP here is ``score("neural", hidden="tanh", beta=1.0)`` with ``d = 2``,
``d' = 2`` and its down-projections fixed to the identity, ``Wq = Wk = I``,
so that it sees ``(q, k)`` directly as in NeuralAttn's Eq. 4 and Fig. 1.
Training ``Wq, Wk`` as well would add nothing: ``Whq Wq`` is just another
``h x 2`` matrix. Derivation: ``derivations/08-neural-attention-expressivity.md``.
``refattn neural-surface`` (:class:`Settings`, :func:`run`) runs the fit and
draws the predictions against the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..core.backend import array_module

from ..core.checks import check_float_array, check_int
from ..training.optim import Adam
from ..core.scores import Score, score
from ..training.runs import check_memory
from . import StudySettings, max_memory, option

__all__ = [
    "DOMAIN",
    "NEURAL",
    "TARGETS",
    "FROZEN",
    "diagonal_surface",
    "sample_pairs",
    "rbf_similarity",
    "example_bilinear",
    "EXAMPLE_A",
    "EXAMPLE_B",
    "init_mlp",
    "mlp_predict",
    "squared_loss",
    "squared_loss_grad",
    "fit_bilinear",
    "bilinear_floor_rbf",
    "bilinear_predict",
    "rmse",
    "RelationFit",
    "fit_relation",
    "Settings",
    "run",
    "result_of",
    "report",
    "plot",
]

#: Queries and keys are drawn from ``U[-DOMAIN, DOMAIN]^2``.
DOMAIN = 2.0

#: The score MLP of NeuralAttn, Eq. 4 (beta = 1: no 1/sqrt(d) inside the score).
NEURAL = score("neural", hidden="tanh", beta=1.0)

#: Parameters of :data:`NEURAL` that :func:`fit_relation` keeps fixed at the identity.
FROZEN = ("Wq", "Wk")


def _pairs(q, k, z=None):
    """Check ``q, k (n, d)`` (and ``z (n,)``): one query-key pair per row."""
    check_float_array(q, "q", ndim=2)
    check_float_array(k, "k", ndim=2)
    if q.shape != k.shape:
        raise ValueError(f"k: expected the shape of q {q.shape} (one key per query), got {k.shape}")
    if z is not None:
        check_float_array(z, "z", ndim=1)
        if z.shape[0] != q.shape[0]:
            raise ValueError(f"z: expected {q.shape[0]} targets (one per pair), got {z.shape[0]}")


# --------------------------------------------------------------------------
# The diagonal q = k = (x, y) (NeuralAttn, Fig. 1)
# --------------------------------------------------------------------------


def diagonal_surface(score_fn, params, grid):
    """The score surface ``z(x, y) = f(q, k)`` on the diagonal ``q = k = (x, y)``.

    NeuralAttn, section 1.2 and Fig. 1: for the dot score ``z = x^2 + y^2``
    (a paraboloid, Eq. 2); for the neural score
    ``z = wa . sigma(W_h [x, y, x, y] + bh) + ba`` (Eq. 4).
    ``derivations/08-neural-attention-expressivity.md``, section 1.

    Each grid point is one batch element with one query and one key, so the
    cost is linear in the number of points (no ``m x m`` score matrix).

    Parameters
    ----------
    score_fn : refattn.core.scores.Score
        A pairwise score, e.g. ``score("dot")`` or :data:`NEURAL`.
    params : dict or None
        Its parameters for feature size ``d = 2``.
    grid : ndarray (m,) or pair of ndarrays (xs (m_x,), ys (m_y,))
        Coordinates; a single array is used for both ``x`` and ``y``.

    Returns
    -------
    X, Y, Z : ndarray, shape (m_y, m_x)
        ``numpy.meshgrid(xs, ys)`` and ``Z[a, b] = f(p, p)`` with
        ``p = (xs[b], ys[a])``.
    """
    if not isinstance(score_fn, Score):
        raise TypeError(f"score_fn: expected a refattn score (refattn.score(name)), "
                        f"got {type(score_fn).__name__}")
    if not score_fn.pairwise:
        raise ValueError(f"score_fn: expected a pairwise score, got the per-token {score_fn!r}")
    xs, ys = grid if isinstance(grid, (tuple, list)) and len(grid) == 2 else (grid, grid)
    check_float_array(xs, "grid (x)", ndim=1)
    check_float_array(ys, "grid (y)", ndim=1)
    X, Y = np.meshgrid(xs, ys)  # (m_y, m_x) each
    p = np.stack([X.ravel(), Y.ravel()], axis=-1)[:, None, :]  # (m, 1, 2): one token per batch element
    Z = score_fn(p, p, params)  # (m, 1, 1)
    return X, Y, Z.reshape(X.shape)


# --------------------------------------------------------------------------
# Data and targets
# --------------------------------------------------------------------------


def sample_pairs(n, rng):
    """``n`` independent pairs ``q, k ~ U[-DOMAIN, DOMAIN]^2``; returns ``q, k (n, 2)``.

    The data distribution of ``derivations/08-neural-attention-expressivity.md``,
    section 3 (NeuralAttn prescribes none; its Fig. 1 plots ``x, y`` in a box).
    """
    n = check_int(n, "n")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    q = rng.uniform(-DOMAIN, DOMAIN, size=(n, 2))  # (n, 2)
    k = rng.uniform(-DOMAIN, DOMAIN, size=(n, 2))  # (n, 2)
    return q, k


def rbf_similarity(q, k, r=1.0):
    """RBF similarity ``z = exp(-|q - k|^2 / (2 r^2))`` of each pair (rows of ``q, k``).

    Not bilinear: it is 1 on the whole diagonal ``q = k``, where every
    bilinear form is a quadratic form in ``q``
    (``derivations/08-neural-attention-expressivity.md``, section 3).
    """
    _pairs(q, k)
    diff = q - k  # (n, d)
    return np.exp(-np.sum(diff * diff, axis=-1) / (2.0 * r * r))  # (n,)


#: The bilinear relation of :func:`example_bilinear`: ``z = q^T A k + b``.
EXAMPLE_A = np.array([[0.8, -1.2], [0.5, 0.3]])
EXAMPLE_B = 0.25


def example_bilinear(q, k):
    """A relation that *is* bilinear, ``z = q^T A k + b`` with :data:`EXAMPLE_A`,
    :data:`EXAMPLE_B`: the least-squares fit must recover it exactly
    (``derivations/08-neural-attention-expressivity.md``, Eq. 08.NE1)."""
    _pairs(q, k)
    return np.einsum("ni,ij,nj->n", q, EXAMPLE_A, k) + EXAMPLE_B  # (n,)


#: Named targets for :func:`fit_relation`.
TARGETS: dict = {"rbf": rbf_similarity, "bilinear": example_bilinear}


# --------------------------------------------------------------------------
# The MLP score and its loss
# --------------------------------------------------------------------------


def init_mlp(hidden_size, rng):
    """Parameters of :data:`NEURAL` for ``d = d' = 2`` with ``Wq = Wk = I``.

    The other weights come from ``NEURAL.init_params`` (normal, scaled by
    ``1/sqrt(fan-in)``); see :mod:`refattn.core.scores`. With ``Wq = Wk = I`` the
    score is NeuralAttn's Eq. 4 on ``concat(q, k)``
    (``derivations/08-neural-attention-expressivity.md``, Eq. 08.NE8).
    """
    params = NEURAL.init_params(2, rng, d_prime=2, hidden_size=check_int(hidden_size, "hidden_size"))
    params["Wq"], params["Wk"] = np.eye(2), np.eye(2)
    return params


def mlp_predict(params, q, k):
    """``z_n = NEURAL(q_n, k_n)`` for each pair: NeuralAttn, Eq. 4 with ``beta = 1``
    (``derivations/08-neural-attention-expressivity.md``, Eq. 08.NE8).

    Returns shape ``(n,)``. Written against the array module of its inputs,
    so autograd can trace it.
    """
    return NEURAL(q[:, None, :], k[:, None, :], params)[:, 0, 0]  # (n,)


def squared_loss(params, q, k, z):
    """Mean squared error ``L = (1/n) sum_n (s_n - z_n)^2`` of the MLP's scores ``s``.

    ``derivations/08-neural-attention-expressivity.md``, Eq. 08.NE9. Traceable by
    autograd (the reference for :func:`squared_loss_grad`).
    """
    _pairs(q, k, z)
    xp = array_module(q, k, z, *params.values())
    r = mlp_predict(params, q, k) - z  # (n,)
    return xp.mean(r * r)


def squared_loss_grad(params, q, k, z):
    """``L`` and ``dL/dparams`` through the score's hand-derived VJP.

    ``dL/ds_n = 2 (s_n - z_n) / n`` (Eq. 08.NE10 of
    ``derivations/08-neural-attention-expressivity.md``), then
    ``NEURAL.backward(dL/ds, NEURAL.forward(q, k, params)[1])`` (``derivations/02-scores.md``,
    "neural") gives the gradient of every parameter, ``Wq`` and ``Wk``
    included. Not a backward pass: the loss ends the chain, so there is no
    upstream gradient to put first; the arguments are the loss's own, the
    parameters and then the data (queries, keys, targets).

    Returns
    -------
    loss : float
    grads : dict of str to ndarray
        Same keys and shapes as ``params``.
    """
    _pairs(q, k, z)
    q3, k3 = q[:, None, :], k[:, None, :]  # (n, 1, 2): one pair per batch element
    r = NEURAL(q3, k3, params)[:, 0, 0] - z  # (n,)
    grad_s = (2.0 / r.shape[0]) * r  # (n,)  dL/ds
    _, _, grads = NEURAL.backward(grad_s[:, None, None], NEURAL.forward(q3, k3, params)[1])
    return float(np.mean(r * r)), grads


# --------------------------------------------------------------------------
# The best dot product: a bilinear form, by least squares
# --------------------------------------------------------------------------


def fit_bilinear(q, k, z):
    """Least-squares fit of ``z ~ q^T A k + b`` over all ``A (d, d)`` and ``b``.

    ``q^T A k = sum_ij A_ij q_i k_j`` is linear in the ``d^2 + 1`` unknowns,
    with features ``q_i k_j`` and 1, so ordinary least squares finds the global
    optimum in closed form (``numpy.linalg.lstsq``). Every dot product of
    linear projections, ``(W_q q) . (W_k k) = q^T (W_q^T W_k) k``, is of this
    form (``derivations/08-neural-attention-expressivity.md``, Eqs. 08.NE1-08.NE3).

    Returns
    -------
    A : ndarray, shape (d, d)
    b : float
    """
    _pairs(q, k, z)
    n, d = q.shape
    X = np.concatenate([(q[:, :, None] * k[:, None, :]).reshape(n, d * d),  # (n, d^2): q_i k_j
                        np.ones((n, 1))], axis=1)  # (n, d^2 + 1)
    coef = np.linalg.lstsq(X, z, rcond=None)[0]  # (d^2 + 1,)
    return coef[:-1].reshape(d, d), float(coef[-1])


def bilinear_floor_rbf(r=1.0, n_nodes=64):
    """The best any bilinear score can do on the RBF target, over the whole distribution.

    For ``q, k ~ U[-D, D]^2`` (``D = DOMAIN``) the features ``q_i k_j`` have
    mean 0, variance ``sigma^4`` (``sigma^2 = D^2 / 3``) and are mutually
    uncorrelated, so the population least-squares optimum of
    ``q^T A k + b`` against ``z = exp(-gamma |q - k|^2)``, ``gamma = 1/(2 r^2)``,
    is (``derivations/08-neural-attention-expressivity.md``, Eqs. 08.NE5-08.NE7)

        b* = I0(gamma)^2,   A* = a I,   a = I0(gamma) I1(gamma) / sigma^4,
        RMSE*^2 = I0(2 gamma)^2 - I0(gamma)^4 - 2 a^2 sigma^4,

    with the one-dimensional expectations over ``x, y ~ U[-D, D]``
    ``I0(g) = E[exp(-g (x - y)^2)]`` and ``I1(g) = E[x y exp(-g (x - y)^2)]``.
    Both are integrals over ``u = |x - y|``, whose density is
    ``(2D - u) / (2 D^2)`` on ``[0, 2D]``, using ``E[x y | u] = ((2D - u)^2 / 3 - u^2) / 4``;
    they are evaluated by Gauss-Legendre quadrature with ``n_nodes`` nodes
    (smooth integrands: 64 nodes give rounding-level accuracy).

    Returns
    -------
    dict
        ``{"a", "b", "rmse", "rmse_constant"}``; ``rmse_constant`` is the
        standard deviation of ``z`` (the best constant predictor).
    """
    r = float(r)
    if not (math.isfinite(r) and r > 0):
        raise ValueError(f"r: expected a positive finite radius, got {r!r}")
    n_nodes = check_int(n_nodes, "n_nodes", least=2)
    D = DOMAIN
    t, w = np.polynomial.legendre.leggauss(n_nodes)  # nodes and weights on [-1, 1]
    u, w = D * (t + 1.0), D * w  # on [0, 2D]
    density = (2.0 * D - u) / (2.0 * D * D)  # of u = |x - y|
    xy = ((2.0 * D - u) ** 2 / 3.0 - u * u) / 4.0  # E[x y | u]

    def I0(g):
        return float(np.sum(w * density * np.exp(-g * u * u)))

    gamma = 1.0 / (2.0 * r * r)
    i0, i0_2 = I0(gamma), I0(2.0 * gamma)
    i1 = float(np.sum(w * density * xy * np.exp(-gamma * u * u)))
    s4 = (D * D / 3.0) ** 2  # sigma^4
    a, b = i0 * i1 / s4, i0 * i0
    var_z = i0_2 * i0_2 - b * b  # E[z^2] - E[z]^2
    return {"a": a, "b": b, "rmse": math.sqrt(var_z - 2.0 * a * a * s4),
            "rmse_constant": math.sqrt(var_z)}


def bilinear_predict(A, b, q, k):
    """``z_n = q_n^T A k_n + b`` for each pair; shape ``(n,)``
    (``derivations/08-neural-attention-expressivity.md``, Eq. 08.NE1)."""
    _pairs(q, k)
    return np.einsum("ni,ij,nj->n", q, A, k) + b


def rmse(pred, z):
    """Root mean squared error ``sqrt(mean((pred - z)^2))``, the square root of
    the loss 08.NE9 of ``derivations/08-neural-attention-expressivity.md``."""
    pred, z = np.asarray(pred), np.asarray(z)
    if pred.shape != z.shape:
        raise ValueError(f"pred: shape {pred.shape} does not match the targets' {z.shape}")
    return float(np.sqrt(np.mean((pred - z) ** 2)))


# --------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------


@dataclass
class RelationFit:
    """The result of :func:`fit_relation`.

    ``rmse[model][split]`` for ``model`` in ``("constant", "bilinear", "mlp")``
    and ``split`` in ``("train", "test")``; ``pred_test[model]`` the test
    predictions; ``loss_history[t]`` the MLP's training MSE before step ``t + 1``.
    """

    target: str
    q_train: np.ndarray
    k_train: np.ndarray
    z_train: np.ndarray
    q_test: np.ndarray
    k_test: np.ndarray
    z_test: np.ndarray
    bilinear_A: np.ndarray
    bilinear_b: float
    mlp_params: dict
    loss_history: np.ndarray
    rmse: dict = field(default_factory=dict)
    pred_test: dict = field(default_factory=dict)

    def summary(self) -> str:
        """The RMSE table as text."""
        rows = [f"target {self.target!r}: RMSE (train / test)"]
        for model, r in self.rmse.items():
            rows.append(f"  {model:9s} {r['train']:.3e} / {r['test']:.3e}")
        return "\n".join(rows)


def fit_relation(target="rbf", *, n_train=1000, n_test=1000, hidden_size=32, steps=2000,
                 lr=0.01, seed=0):
    """Fit a query-key relation ``z = target(q, k)`` (a name of :data:`TARGETS` or a function) on pairs
    ``q, k ~ U[-2, 2]^2`` (:func:`sample_pairs`) by a constant (the training mean), the best bilinear score
    ``q^T A k + b`` (:func:`fit_bilinear`, exact least squares) and the score MLP :data:`NEURAL`
    (NeuralAttn Eq. 4, ``Wq = Wk = I``; :func:`init_mlp`, ``steps`` full-batch Adam steps on
    :func:`squared_loss` with the hand-derived VJP :func:`squared_loss_grad`); each fitted on the
    ``n_train`` training pairs, measured on the ``n_test`` others; ``seed`` seeds data and initialisation
    (``derivations/08-neural-attention-expressivity.md``, section 4). Returns a :class:`RelationFit`.
    """
    if isinstance(target, str):
        if target not in TARGETS:
            raise ValueError(f"target: unknown name {target!r}; expected one of {tuple(TARGETS)} "
                             f"or a callable f(q, k) -> z")
        name, fn = target, TARGETS[target]
    elif callable(target):
        name, fn = getattr(target, "__name__", "custom"), target
    else:
        raise TypeError(f"target: expected a name in {tuple(TARGETS)} or a callable, "
                        f"got {type(target).__name__}")
    n_train, n_test = check_int(n_train, "n_train"), check_int(n_test, "n_test")
    steps = check_int(steps, "steps", least=0)
    rng = np.random.default_rng(seed)
    q, k = sample_pairs(n_train + n_test, rng)  # (N, 2) each
    z = np.asarray(fn(q, k), dtype=np.float64)  # (N,)
    if z.shape != (n_train + n_test,) or not np.all(np.isfinite(z)):
        raise ValueError(f"target: expected finite values of shape ({n_train + n_test},), "
                         f"got shape {z.shape}")
    tr, te = slice(0, n_train), slice(n_train, None)

    A, b = fit_bilinear(q[tr], k[tr], z[tr])

    params = init_mlp(hidden_size, rng)
    trainable = {p: v for p, v in params.items() if p not in FROZEN}  # same arrays, updated in place
    opt = Adam(trainable, lr=lr)
    history = np.empty(steps)
    for t in range(steps):
        history[t], grads = squared_loss_grad(params, q[tr], k[tr], z[tr])
        opt.step({p: grads[p] for p in trainable})

    preds = {
        "constant": lambda s: np.full(z[s].shape, z[tr].mean()),
        "bilinear": lambda s: bilinear_predict(A, b, q[s], k[s]),
        "mlp": lambda s: mlp_predict(params, q[s], k[s]),
    }
    out = RelationFit(name, q[tr], k[tr], z[tr], q[te], k[te], z[te], A, b, params, history)
    for model, f in preds.items():
        out.pred_test[model] = f(te)
        out.rmse[model] = {"train": rmse(f(tr), z[tr]), "test": rmse(out.pred_test[model], z[te])}
    return out


# --------------------------------------------------------------------------
# The study: refattn neural-surface
# --------------------------------------------------------------------------

#: The figure ``refattn neural-surface --out DIR`` writes.
FIGURE = "neural_surface_{target}.png"


@dataclass
class Settings(StudySettings):
    """NeuralAttn's Fig. 1 argument: a query-key relation fitted by the best bilinear score (every dot
    product of projections) and by the Neural Attention score MLP, RMSE on held-out pairs."""

    target: str = option("rbf", "the relation: rbf, exp(-|q - k|^2 / 2), or a bilinear example",
                         choices=tuple(TARGETS))
    n_train: int = option(1000, "training pairs", low=1)
    n_test: int = option(1000, "test pairs", low=1)
    hidden_size: int = option(32, "hidden units of the score MLP", low=1)
    steps: int = option(2000, "full-batch Adam steps", low=0)
    lr: float = option(0.01, "Adam's step size", positive=True)
    seed: int = option(0, "seed of the pairs and the MLP's initialisation", low=0)
    max_memory: float | None = max_memory()


def memory_estimate(n_train, n_test, hidden_size):
    """Bytes ``refattn neural-surface`` needs at its peak, before any work: per pair, the score
    MLP's hidden layer and its gradient (tracemalloc measures about 6 float64 per pair and hidden
    unit, and 20 more per pair; the estimate allows 8 and 32)."""
    return 8 * (int(n_train) + int(n_test)) * (8 * int(hidden_size) + 32) + 2**20


def run(settings):
    """:func:`fit_relation` with these settings, as a JSON-able dict.

    Keys: ``target``, ``rmse`` (``{model: {"train", "test"}}`` for the
    constant, the bilinear fit and the MLP), ``bilinear_A``, ``bilinear_b``,
    ``loss_history`` (the MLP's training MSE per step), ``z_test`` and
    ``pred_test`` (the figure's points), and for the RBF target
    ``bilinear_floor`` (:func:`bilinear_floor_rbf`: the population optimum of
    any bilinear score).
    """
    check_memory(memory_estimate(settings.n_train, settings.n_test, settings.hidden_size),
                 f"--n-train {settings.n_train} --n-test {settings.n_test} --hidden-size {settings.hidden_size}",
                 settings.max_memory)
    return result_of(fit_relation(settings.target, n_train=settings.n_train, n_test=settings.n_test,
                                  hidden_size=settings.hidden_size, steps=settings.steps, lr=settings.lr,
                                  seed=settings.seed))


def result_of(fit):
    """The JSON-able result of :func:`run` from a :class:`RelationFit` (what :func:`report` and
    :func:`plot` read)."""
    out = {"target": fit.target, "n_train": len(fit.z_train), "n_test": len(fit.z_test),
           "steps": len(fit.loss_history), "rmse": fit.rmse, "bilinear_A": fit.bilinear_A.tolist(),
           "bilinear_b": float(fit.bilinear_b), "loss_history": fit.loss_history.tolist(),
           "z_test": fit.z_test.tolist(), "pred_test": {m: p.tolist() for m, p in fit.pred_test.items()}}
    if fit.target == "rbf":
        out["bilinear_floor"] = bilinear_floor_rbf()
    return out


def report(result):
    """The RMSE table, and for the RBF target the best any bilinear score can do."""
    rows = [f"target {result['target']!r}: RMSE (train / test), {result['n_train']} / {result['n_test']} pairs"]
    for model, r in result["rmse"].items():
        rows.append(f"  {model:9s} {r['train']:.3e} / {r['test']:.3e}")
    floor = result.get("bilinear_floor")
    if floor is not None:
        rows.append(f"population optimum of any bilinear score (quadrature): RMSE {floor['rmse']:.4f}, constant: "
                    f"{floor['rmse_constant']:.4f}, A* = {floor['a']:.4f} I, b* = {floor['b']:.4f}")
    return "\n".join(rows)


def plot(result):
    """Test predictions of the bilinear fit and of the MLP against the target, and the MLP's training
    curve beside the bilinear and constant fits' training MSE."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(12, 3.5))
    axes = fig.subplots(1, 3)
    z = np.asarray(result["z_test"])
    lo, hi = float(z.min()), float(z.max())
    for ax, model in zip(axes[:2], ("bilinear", "mlp")):
        ax.scatter(z, result["pred_test"][model], s=4, alpha=0.4)
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        ax.set_xlabel("target z")
        ax.set_ylabel("prediction")
        r = result["rmse"][model]
        ax.set_title(f"{model}: RMSE train {r['train']:.4f}, test {r['test']:.4f}", fontsize=9)
    axes[2].semilogy(result["loss_history"])
    axes[2].axhline(result["rmse"]["bilinear"]["train"] ** 2, color="C1", ls="--", label="bilinear (train MSE)")
    axes[2].axhline(result["rmse"]["constant"]["train"] ** 2, color="C2", ls=":", label="constant (train MSE)")
    axes[2].set_xlabel("Adam step")
    axes[2].set_ylabel("MLP training MSE")
    axes[2].legend(fontsize=7)
    axes[2].set_title("training curve", fontsize=9)
    fig.tight_layout()
    return fig
