r"""Attention-space geometry: dot-product vs expressive attention (Expressive, Fig. 1).

Expressive compares one query ``Q`` with keys ``K_k`` through ``z = Q . K``:

* dot-product attention (DPA), Eq. 1: ``a_k = exp(beta z_k) / Z``;
* expressive attention (EA), Eq. 2: ``a_k = (z_k^2 / (1 + z_k^2)) / N``.

Write ``z = c cos(theta)`` with ``c = beta |q| |k|`` (keys of one norm) and
``theta`` the angle between query and key. Then (derivation
``derivations/07-expressive-geometry.md``):

* DPA's weight is increasing in ``cos(theta)``: largest for the parallel key
  (0 degrees), smallest for the antiparallel one (180 degrees), and
  ``a(0) / a(180) = exp(2c)``, which grows without bound with ``c``.
* EA's weight is increasing in ``|cos(theta)|``: equal and largest at 0 and
  180 degrees (``a(0) / a(180) = 1`` for every ``c``), exactly 0 at 90
  degrees, and ``a(0) / a(theta) = (1 + c^2 cos^2) / ((1 + c^2) cos^2)``,
  which *decreases* from ``1 / cos^2(theta)`` (small ``c``) to 1 (large
  ``c``): the norm narrows EA's low-attention notch around 90 degrees instead
  of sharpening a peak.

Every weight here comes from the registered activation
(:func:`refattn.core.activations.activation`) applied to scores from the
registered ``scaled_dot`` score (:func:`refattn.core.scores.score`); the closed
forms (:func:`weight_ratio`, :func:`dpa_half_width`,
:func:`ea_notch_half_width`) are independent of that code, and the tests
compare the two. ``refattn geometry`` (:class:`Settings`, :func:`run`) prints
both side by side and draws the weights against the angle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.activations import activation as get_activation
from ..core.checks import check_float_array, check_int, check_real
from ..core.scores import score
from ..training.runs import check_memory
from . import StudySettings, max_memory, option

__all__ = [
    "CLOSED_FORMS",
    "attention_weights",
    "circle_keys",
    "weight_vs_angle",
    "weight_ratio",
    "dpa_half_width",
    "ea_notch_half_width",
    "random_unit_vectors",
    "weight_vs_cosine",
    "Settings",
    "run",
    "report",
    "plot",
]

#: The activations of Expressive: DPA is ``softmax``, EA is ``expressive``.
CLOSED_FORMS = ("softmax", "expressive")


def _c_array(c):
    """``c = beta |q| |k|`` as a float array of positive finite values."""
    arr = np.asarray(c)
    if isinstance(c, (bool, np.bool_)) or arr.dtype.kind not in "iuf":
        raise TypeError(f"c: expected a positive number or array of them, got {type(c).__name__}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr) & (arr > 0)):
        raise ValueError(f"c: expected positive finite values (c = beta |q| |k|), got {c!r}")
    return arr


def attention_weights(activation, query, keys, *, beta=1.0):
    """Weights of one query over a set of keys: ``phi(beta q . k_j)``.

    Parameters
    ----------
    activation : str
        A registered activation (``refattn.ACTIVATIONS``); ``"softmax"`` is
        Expressive's DPA (Eq. 1), ``"expressive"`` its EA (Eq. 2).
    query : ndarray, shape (d,)
    keys : ndarray, shape (n, d)
    beta : float
        Inverse temperature, ``> 0``.

    Returns
    -------
    ndarray, shape (n,)
        ``phi(z)`` with ``z_j = beta q . k_j`` from ``score("scaled_dot", beta=beta)``
        and ``phi = refattn.activation(activation).forward``
        (``derivations/07-expressive-geometry.md``, Eqs. 07.EG1-07.EG2).
    """
    act = get_activation(activation)
    check_float_array(query, "query", ndim=1)
    check_float_array(keys, "keys", ndim=2)
    if keys.shape[1] != query.shape[0]:
        raise ValueError(f"keys: expected shape (n, {query.shape[0]}) to match the query, "
                         f"got {keys.shape}")
    beta = check_real(beta, "beta", positive=True)
    z = score("scaled_dot", beta=beta)(query[None, :], keys)[0]  # (n,)
    return act(z)  # (n,)


def circle_keys(n_keys, *, norm_k=1.0, dim=2):
    """``n_keys`` keys of norm ``norm_k`` spread uniformly on a circle.

    The angles are ``theta_j = -pi + 2 pi j / n_keys``, ``j = 0..n_keys-1``
    (so ``[-180, 180)`` degrees), in the plane of the first two coordinates
    of ``R^dim``: ``k_j = norm_k (cos theta_j, sin theta_j, 0, ..., 0)``.
    ``n_keys`` must be a multiple of 4 so that 0, +-90 and -180 degrees are on
    the grid; those keys are exact (``cos 90 = 0``, not ``6e-17``), and the
    key at ``theta - 180`` is exactly ``-k(theta)``. These are the keys of
    Expressive's Fig. 1 (``derivations/07-expressive-geometry.md``, section 1).

    Returns
    -------
    angles : ndarray, shape (n_keys,)
        In radians.
    keys : ndarray, shape (n_keys, dim)
    """
    n = check_int(n_keys, "n_keys", 4)
    if n % 4:
        raise ValueError(f"n_keys: expected a multiple of 4 (so 0, 90 and 180 degrees are "
                         f"on the grid), got {n}")
    dim = check_int(dim, "dim", 2)
    norm_k = check_real(norm_k, "norm_k", positive=True)
    m = np.arange(n // 2)  # the upper half, theta in [0, pi)
    half = 2.0 * np.pi * m / n  # (n/2,)
    cos, sin = np.cos(half), np.sin(half)
    quarter = m == n // 4  # theta = 90 degrees exactly
    cos[quarter], sin[quarter] = 0.0, 1.0
    upper = np.zeros((n // 2, dim))
    upper[:, 0], upper[:, 1] = cos, sin
    angles = np.concatenate([half - np.pi, half])  # (n,) in [-pi, pi)
    keys = norm_k * np.concatenate([-upper, upper])  # (n, dim): k(theta - pi) = -k(theta)
    return angles, keys


def weight_vs_angle(activation, *, norm_q, norm_k, n_keys, beta=1.0, dim=2):
    """Attention weight of each key against its angle to the query (Expressive, Fig. 1).

    The query is ``q = norm_q e_1``; the keys are :func:`circle_keys`; the
    scores are ``z_j = beta q . k_j = c cos(theta_j)`` with
    ``c = beta norm_q norm_k``; the weights are
    ``refattn.activation(activation)(z)``, one row over all keys. Only
    the angle matters, so ``dim`` changes nothing (a test checks this).

    Parameters
    ----------
    activation : str
        A registered activation; ``"softmax"`` (DPA, Expressive Eq. 1) and
        ``"expressive"`` (EA, Expressive Eq. 2) are the two of the figure.
    norm_q, norm_k : float
        ``|q|`` and ``|k|``, ``> 0``.
    n_keys : int
        Number of keys, a multiple of 4.
    beta : float
        Inverse temperature of the score, ``> 0``.
    dim : int
        Dimension of the space, ``>= 2``.

    Returns
    -------
    angles : ndarray, shape (n_keys,)
        Radians in ``[-pi, pi)``.
    weights : ndarray, shape (n_keys,)
        ``phi_j``; sums to 1 for both DPA and EA. Closed forms: Eqs. 07.EG3-07.EG6 of
        ``derivations/07-expressive-geometry.md``.
    """
    norm_q = check_real(norm_q, "norm_q", positive=True)
    angles, keys = circle_keys(n_keys, norm_k=norm_k, dim=dim)  # (n,), (n, dim)
    query = np.zeros(keys.shape[1])
    query[0] = norm_q  # (dim,)
    return angles, attention_weights(activation, query, keys, beta=beta)


def weight_ratio(activation, cos_a, cos_b, *, c):
    """Closed form of ``phi_a / phi_b`` for two keys of one norm in one row.

    With ``z = c cos(theta)``, ``c = beta |q| |k|``, the normaliser cancels:

    * ``"softmax"`` (DPA): ``exp(c (cos_a - cos_b))``
      (``derivations/07-expressive-geometry.md``, Eq. 07.EG3);
    * ``"expressive"`` (EA): ``[x_a / (1 + x_a)] / [x_b / (1 + x_b)]`` with
      ``x = c^2 cos^2`` (Eq. 07.EG4); ``inf`` where ``cos_b = 0`` and ``cos_a != 0``
      (an orthogonal key has weight exactly 0), ``nan`` where both are 0.

    Parameters
    ----------
    activation : {"softmax", "expressive"}
    cos_a, cos_b : float or ndarray
        Cosines of the two keys' angles to the query, in ``[-1, 1]``.
    c : float or ndarray
        ``beta |q| |k| > 0``. Broadcasts with the cosines.

    Returns
    -------
    ndarray or float
    """
    if activation not in CLOSED_FORMS:
        raise ValueError(f"activation: closed forms exist for {CLOSED_FORMS}, "
                         f"got {activation!r}")
    ca, cb = (np.asarray(x, dtype=np.float64) for x in (cos_a, cos_b))
    for name, x in (("cos_a", ca), ("cos_b", cb)):
        if not np.all(np.abs(x) <= 1.0):
            raise ValueError(f"{name}: expected cosines in [-1, 1], got {x!r}")
    c = _c_array(c)
    if activation == "softmax":
        return np.exp(c * (ca - cb))[()]  # 07.EG3
    xa, xb = (c * ca) ** 2, (c * cb) ** 2
    num, den = xa / (1.0 + xa), xb / (1.0 + xb)  # z^2 / (1 + z^2)
    num, den = np.broadcast_arrays(num, den)
    out = np.where(num > 0, np.inf, np.nan)  # the value where den = 0
    return np.divide(num, den, out=out, where=den > 0)[()]  # 07.EG4


def dpa_half_width(c):
    """Half-width of DPA's peak: the angle from 0 degrees where the weight halves.

    ``a(theta) / a(0) = exp(-c (1 - cos theta)) = 1/2`` gives
    ``theta = arccos(1 - ln 2 / c)`` (``derivations/07-expressive-geometry.md``,
    Eq. 07.EG5), about ``sqrt(2 ln 2 / c)`` for large ``c``. For
    ``c < ln(2) / 2`` even the antiparallel key keeps more than half the top
    weight, and the result is ``nan``.

    Parameters
    ----------
    c : float or ndarray
        ``beta |q| |k| > 0``.

    Returns
    -------
    ndarray or float
        Radians.
    """
    c = _c_array(c)
    x = 1.0 - math.log(2.0) / c
    return np.arccos(x, out=np.full_like(x, np.nan), where=x >= -1.0)[()]


def ea_notch_half_width(c):
    """Half-width of EA's low-attention notch around 90 degrees.

    ``a(theta) / a(0) = (1 + c^2) cos^2 / (1 + c^2 cos^2) = 1/2`` gives
    ``cos^2 theta = 1 / (2 + c^2)``, so the keys within
    ``delta = arcsin(1 / sqrt(2 + c^2))`` of 90 degrees get less than half of
    the top weight (``derivations/07-expressive-geometry.md``, Eq. 07.EG6):
    45 degrees as ``c -> 0`` (the ``cos^2`` profile), about ``1/c`` for large
    ``c``.

    Parameters
    ----------
    c : float or ndarray
        ``beta |q| |k| > 0``.

    Returns
    -------
    ndarray or float
        Radians.
    """
    c = _c_array(c)
    return np.arcsin(1.0 / np.sqrt(2.0 + c * c))[()]


def random_unit_vectors(n, dim, rng):
    """``n`` directions drawn uniformly from the unit sphere of ``R^dim``.

    Normalised standard normal vectors (the normal law is rotation
    invariant). The cosine of one of them with a fixed unit vector has mean 0
    and variance exactly ``1/dim`` (``derivations/07-expressive-geometry.md``,
    Eq. 07.EG7): in high dimension random keys are nearly orthogonal to the query.

    Returns
    -------
    ndarray, shape (n, dim)
    """
    n = check_int(n, "n", 1)
    dim = check_int(dim, "dim", 2)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    x = rng.standard_normal((n, dim))  # (n, dim)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def weight_vs_cosine(activation, *, dim=64, n_keys=256, norm_q=1.0, norm_k=1.0, beta=1.0,
                     planted=(1.0, -1.0), seed=0):
    """Weights of random and planted keys in ``R^dim`` against their cosine to the query.

    The query is ``norm_q e_1``. The keys, all of norm ``norm_k``, are first
    one *planted* key per entry of ``planted``, with exactly that cosine
    (``k = norm_k (cos, sqrt(1 - cos^2) u)``, ``u`` a random unit vector of
    the other ``dim - 1`` coordinates), then ``n_keys`` random directions
    (:func:`random_unit_vectors`). All of them share one row of attention.

    Parameters
    ----------
    activation : str
        A registered activation (``"softmax"``: DPA; ``"expressive"``: EA).
    dim : int
        Dimension, ``>= 2``.
    n_keys : int
        Number of random keys, ``>= 1``.
    norm_q, norm_k, beta : float
        ``> 0``; the scores are ``z = c cos`` with ``c = beta norm_q norm_k``.
    planted : sequence of float
        Cosines in ``[-1, 1]`` of the planted keys (default: one aligned,
        one anti-aligned).
    seed : int
        Seed of the random keys.

    Returns
    -------
    cosines : ndarray, shape (p + n_keys,), p = len(planted)
        Planted keys first, in the given order.
    weights : ndarray, same shape
        From :func:`attention_weights`; for EA a function of ``|cos|`` only,
        for DPA of ``cos``; the mean weight of a random key relative to the
        aligned one is about ``(1 + c^2)/dim`` for EA and
        ``exp(-c) (1 + c^2/(2 dim))`` for DPA when ``c^2 << dim``
        (``derivations/07-expressive-geometry.md``, section 4, Eq. 07.EG8).
    """
    dim = check_int(dim, "dim", 2)
    n_keys = check_int(n_keys, "n_keys", 1)
    norm_q = check_real(norm_q, "norm_q", positive=True)
    norm_k = check_real(norm_k, "norm_k", positive=True)
    planted = np.asarray(planted, dtype=np.float64).reshape(-1)
    if not np.all(np.abs(planted) <= 1.0):
        raise ValueError(f"planted: expected cosines in [-1, 1], got {planted!r}")
    rng = np.random.default_rng(seed)
    p = planted.size
    if p and dim > 2:
        rest = random_unit_vectors(p, dim - 1, rng)  # (p, dim-1): directions orthogonal to e_1
    else:
        rest = np.ones((p, 1))  # in 2-D the orthogonal direction is e_2
    sin = np.sqrt(1.0 - planted ** 2)  # (p,)
    planted_keys = np.concatenate([planted[:, None], sin[:, None] * rest], axis=1)  # (p, dim)
    keys = norm_k * np.concatenate([planted_keys, random_unit_vectors(n_keys, dim, rng)])  # (p+n, dim)
    query = np.zeros(dim)
    query[0] = norm_q  # (dim,)
    cosines = keys[:, 0] / np.linalg.norm(keys, axis=1)  # (p+n,)
    return cosines, attention_weights(activation, query, keys, beta=beta)


# --------------------------------------------------------------------------
# The study: refattn geometry
# --------------------------------------------------------------------------

#: The figure ``refattn geometry --out DIR`` writes.
FIGURE = "geometry.png"

#: Keys on the circle of the contrast table: 1-degree steps, so 0, 45, 90 and 180 degrees are on it.
_FINE = 360


@dataclass
class Settings(StudySettings):
    """Expressive's Fig. 1: weight against the query-key angle for dot-product and expressive attention, the
    contrast against c = beta |q| |k| beside the closed forms, and how much weight random keys get in high
    dimension."""

    cs: tuple[float, ...] = option((0.25, 1.0, 3.0, 9.0), "comma-separated values of c = beta |q| |k|",
                                   positive=True)
    n_keys: int = option(360, "keys spread evenly on the circle (the curves)", low=4)
    dim: int = option(64, "dimension of the random keys", low=2)
    n_random: int = option(2000, "random keys in that dimension", low=1)
    seed: int = option(0, "seed of the random keys", low=0)
    max_memory: float | None = max_memory()


def memory_estimate(n_keys, n_cs, dim, n_random):
    """Bytes ``refattn geometry`` needs at its peak, before any work: the random keys (two float64
    copies of ``n_random x dim``, as tracemalloc measures them; the estimate allows 2.5) and the
    curves (about 150 bytes per key and value of ``c``; the estimate allows 200)."""
    return 20 * int(n_random) * (int(dim) + 4) + 200 * int(n_keys) * int(n_cs) + 2**20


def run(settings):
    """Weights on the circle, the contrast table and the random-key table, as a JSON-able dict.

    * ``circle``: for DPA (``softmax``) and EA (``expressive``) and every
      ``c``, the angles (degrees) of ``n_keys`` keys on the circle and
      ``n_keys`` x their weights (1 = uniform);
    * ``contrast``: for every ``c``, measured on 360 keys and in closed form
      (Eqs. 07.EG3-07.EG6): DPA's ``a(0)/a(180)`` against ``e^{2c}`` and its
      peak half-width; EA's ``a(0)/a(180)`` (1), ``a(0)/a(45)`` against
      ``(2 + c^2)/(1 + c^2)`` and its notch half-width;
    * ``random_keys``: the mean weight of ``n_random`` random keys in
      ``dim`` dimensions relative to an aligned key, for EA (about
      ``(1 + c^2)/dim`` while ``c^2 << dim``) and DPA (about
      ``e^{-c} (1 + c^2 / (2 dim))``), derivation 07, section 4.
    """
    cs = tuple(check_real(c, "cs", positive=True) for c in settings.cs)
    n_keys = check_int(settings.n_keys, "n_keys", 4)
    check_memory(memory_estimate(n_keys, len(cs), settings.dim, settings.n_random),
                 f"--n-keys {n_keys} --dim {settings.dim} --n-random {settings.n_random}", settings.max_memory)
    circle, contrast, random_keys = {}, [], []
    for name in CLOSED_FORMS:
        circle[name] = []
        for c in cs:
            angles, w = weight_vs_angle(name, norm_q=c, norm_k=1.0, n_keys=n_keys)
            circle[name].append({"c": c, "degrees": np.degrees(angles).tolist(), "n_weight": (w * n_keys).tolist()})
    for c in cs:
        a, wd = weight_vs_angle("softmax", norm_q=c, norm_k=1.0, n_keys=_FINE)
        _, we = weight_vs_angle("expressive", norm_q=c, norm_k=1.0, n_keys=_FINE)
        at = {int(d): i for i, d in enumerate(np.round(np.degrees(a)).astype(int))}
        hw = dpa_half_width(c)
        contrast.append({
            "c": c,
            "dpa_0_over_180": float(wd[at[0]] / wd[at[-180]]), "dpa_0_over_180_closed": math.exp(2 * c),
            "dpa_half_width_degrees": None if np.isnan(hw) else float(np.degrees(hw)),
            "ea_0_over_180": float(we[at[0]] / we[at[-180]]), "ea_0_over_45": float(we[at[0]] / we[at[45]]),
            "ea_0_over_45_closed": float(weight_ratio("expressive", 1.0, math.cos(math.pi / 4), c=c)),
            "ea_notch_half_width_degrees": float(np.degrees(ea_notch_half_width(c))),
        })
        rel = {}
        for name in ("expressive", "softmax"):
            _, w = weight_vs_cosine(name, dim=settings.dim, n_keys=settings.n_random, norm_q=c, planted=(1.0,),
                                    seed=settings.seed)
            rel[name] = float(np.mean(w[1:]) / w[0])
        random_keys.append({"c": c, "ea": rel["expressive"], "ea_approx": (1 + c * c) / settings.dim,
                            "dpa": rel["softmax"], "dpa_approx": math.exp(-c) * (1 + c * c / (2 * settings.dim))})
    return {"circle": circle, "contrast": contrast, "random_keys": random_keys, "dim": settings.dim,
            "n_random": settings.n_random, "seed": settings.seed}


def report(result):
    """The contrast table (measured beside the closed forms) and the random-key table."""
    lines = ["Expressive Fig. 1: DPA (softmax) and EA (expressive) on a circle of 360 keys, c = beta |q| |k|",
             f"{'c':>6s} | {'DPA 0/180':>11s} {'e^(2c)':>11s} {'half-width':>10s} | "
             f"{'EA 0/180':>8s} {'EA 0/45':>8s} {'closed':>8s} {'notch half-width':>16s}"]
    for r in result["contrast"]:
        hw = r["dpa_half_width_degrees"]
        lines.append(f"{r['c']:6.2f} | {r['dpa_0_over_180']:11.4e} {r['dpa_0_over_180_closed']:11.4e} "
                     f"{'never' if hw is None else f'{hw:7.2f} deg':>10s} | "
                     f"{r['ea_0_over_180']:8.4f} {r['ea_0_over_45']:8.4f} {r['ea_0_over_45_closed']:8.4f} "
                     f"{r['ea_notch_half_width_degrees']:12.2f} deg")
    d = result["dim"]
    lines += ["", f"mean weight of {result['n_random']} random keys in d = {d} relative to an aligned key "
                  f"(seed {result['seed']})",
              f"{'c':>6s} | {'EA':>8s} {'(1+c^2)/d':>10s} | {'DPA':>8s} {'e^-c(1+c^2/2d)':>14s}"]
    for r in result["random_keys"]:
        lines.append(f"{r['c']:6.2f} | {r['ea']:8.4f} {r['ea_approx']:10.4f} | {r['dpa']:8.4f} {r['dpa_approx']:14.4f}")
    return "\n".join(lines)


def plot(result):
    """n_keys x weight against the angle between key and query, DPA and EA, one curve per c (log scale)."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(10, 3.6))
    axes = fig.subplots(1, 2, sharex=True)
    for ax, name, title in ((axes[0], "softmax", "DPA (Expressive Eq. 1)"),
                            (axes[1], "expressive", "EA (Expressive Eq. 2)")):
        for i, curve in enumerate(result["circle"][name]):
            w = np.asarray(curve["n_weight"])
            keep = w > 0  # EA's weight is exactly 0 at 90 degrees: not on a log axis
            ax.plot(np.asarray(curve["degrees"])[keep], w[keep], color=f"C{i}", label=f"c = {curve['c']:g}")
        ax.set_yscale("log")
        ax.set_xticks([-180, -90, 0, 90, 180])
        ax.set_xlabel("angle between key and query (degrees)")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("n_keys x weight (1 = uniform)")
    fig.tight_layout()
    return fig
