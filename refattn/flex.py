r"""Every g/h activation on a softmax kernel: attention through PyTorch's FlexAttention
(``derivations/24-softmax-kernels.md``; the ``torch`` extra: ``pip install 'refattn[torch]'``).

    import torch, refattn.flex as rf

    y = rf.attention(q, k, v, activation="tanhmax", causal=True)          # (B, H, n_q, d_v)
    y = rf.attention(q, k, v, activation=rf.formula(ell=F.logsigmoid))    # a user's ell, rho = 1
    y = rf.attention(q, k, v, activation=rf.formula(ell=..., rho=torch.tanh, bounded=True))

A softmax kernel computes, per query row, ``O = softmax(t) V`` and the
log-sum-exp ``L = log sum_j e^(t_j)`` of a modified score ``t =
score_mod(s)`` (FlexAttention, Eq. 24.K1). An activation ``phi = rho
softmax(ell)`` (Eq. 01.R1) runs on it by a :class:`Route`: one or two
*pieces* ``t_c`` over copies of the keys, with the values signed ``+v`` or
``-v``, and, where ``rho`` is unbounded, a second normaliser combined through
the log-sum-exps (Eqs. 24.P, 24.U):

* ``rho = 1`` (softmax, expressive, sigsoftmax, sigmoid, cosformer): one call, ``t = ell``;
* ``|rho| <= 1`` (tanhmax, signexp): one call over the keys twice, ``t = log((h +- g)/2)``
  with values ``+-v`` (TanhMax: ``[s, -s]``);
* unbounded ``rho`` (linear, relu): ``t = log(g+-)``, and ``y = O e^(L - L_h)`` with ``L_h`` the
  log-sum-exp of ``ell`` (``log n`` where ``h = 1``: no second call).

The kernel is FlexAttention compiled (``kernel="compiled"``, the fused
kernel, the default on a CUDA device), FlexAttention without ``torch.compile``
(``"eager"``, PyTorch's unfused reference of the same call, the default on the
CPU) or ``"dense"``: the same call written
here with plain tensor operations, which PyTorch's autograd differentiates on
any device (the route's backward on the CPU, where FlexAttention has none).
What PyTorch 2.13 supports is :data:`SUPPORT`; each entry is a test in
``tests/core/test_flex.py``. The routes' forward and backward are tested equal to
:func:`refattn.core.attention.attention` and its backward in float64.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import numpy as np

from .core import activations as A
from .core.activations import sqrt_tiny
from .core.backend import array_module
from .core.scores import Dot, Score, score as get_score

__all__ = ["attention", "formula", "route", "Route", "Piece", "KERNELS", "SUPPORT", "kernel_error"]

#: ``kernel=``: FlexAttention compiled (fused), FlexAttention uncompiled (unfused), or the dense stand-in
KERNELS = ("compiled", "eager", "dense")

#: What PyTorch 2.13's FlexAttention does, per device and kernel (each line a test in tests/core/test_flex.py).
SUPPORT = {
    ("cpu", "compiled"): "refused: with a mask it returned wrong rows, varying from run to run, in this "
                         "project's tests (PyTorch 2.13, derivation 24, section 8)",
    ("cpu", "eager"): "float64, float32, float16, bfloat16, and the log-sum-exp; no backward (inputs that "
                      "require grad are refused, also under no_grad; a captured tensor that requires grad "
                      "is refused by the route after the forward)",
    ("cuda", "compiled"): "float64, float32, float16, bfloat16, the log-sum-exp and its gradient, backward, "
                          "gradients of captured tensors (checked by benchmarks/gpu_check.sh on a device)",
}

LOG2 = math.log(2.0)


class Piece(NamedTuple):
    """One copy of the keys in a kernel call: the modified score ``t(s)`` (a function of a score tensor,
    written with torch operations) and the sign its values carry (+1 or -1)."""

    t: Callable
    sign: float


class Route(NamedTuple):
    """How an activation runs on softmax-kernel calls (derivation 24, sections 2-4).

    ``pieces`` make one call over ``len(pieces)`` copies of the keys; ``normaliser`` is ``None``
    (the call's own log-sum-exp is ``log sum h``: Eqs. 24.1, 24.P), ``"count"`` (``h = 1``: the
    normaliser is the number of keys kept) or a function ``ell`` (a second call gives ``log sum h``:
    Eq. 24.U).
    """

    pieces: tuple
    normaliser: object = None
    name: str = ""


def _log_pos(torch, x):
    """``log x`` where ``x > 0``, ``-inf`` elsewhere, with a finite gradient everywhere (a safe argument)."""
    pos = x > 0
    return torch.where(pos, torch.log(torch.where(pos, x, 1.0)), -math.inf)


@functools.lru_cache(maxsize=None)
def _builtin_routes():
    """The route of each built-in class (derivation 24's table), its pieces written with torch operations
    that PyTorch's compiler traces; ``tests/core/test_flex.py`` checks each against the class's ``g`` and ``h``."""
    import torch  # noqa: PLC0415  (the torch extra)

    logsigmoid = torch.nn.functional.logsigmoid

    def same(s):
        return s  # softmax: ell = s

    def minus(s):
        return -s  # tanhmax's second piece: log((cosh - sinh)/2) + log 2 = -s

    # log((e^|s| +- sign(s) e^|s|)/2), with slope 0 at s = 0 (the textbook's rho'(0) = ell'(0) = 0); -log 2
    # as a tensor of s's dtype: a where of two Python numbers is a tensor of PyTorch's default dtype
    def signexp_pos(s):
        return torch.where(s > 0, s, torch.where(s == 0, torch.full_like(s, -LOG2), -math.inf))

    def signexp_neg(s):
        return torch.where(s < 0, -s, torch.where(s == 0, torch.full_like(s, -LOG2), -math.inf))

    def expressive(s):
        zero = s.abs() < sqrt_tiny(s)  # h underflows: counts as 0 (derivation 01, section 4.4)
        w = 1.0 / torch.where(zero, 1.0, s)
        return torch.where(zero, -math.inf, -torch.log1p(w * w))  # log(s^2/(1+s^2))

    def sigsoftmax(s):
        return s + logsigmoid(s)  # log(e^s sigmoid(s))

    def cosformer(s):
        return torch.where(s < sqrt_tiny(s), -math.inf, torch.log(torch.where(s < sqrt_tiny(s), 1.0, s)))

    def pos(s):
        return _log_pos(torch, s)  # log max(s, 0)

    def asinh_pos(s):
        return torch.asinh(0.5 * s)  # s = e^x - e^-x with x = asinh(s/2)  (Eq. 24.U2)

    def asinh_neg(s):
        return -torch.asinh(0.5 * s)

    one = {A.Softmax: same, A.Expressive: expressive, A.SigSoftmax: sigsoftmax, A.Sigmoid: logsigmoid,
           A.CosFormerNorm: cosformer}
    routes = {cls: Route((Piece(t, 1.0),), None, cls.name) for cls, t in one.items()}
    routes[A.TanhMax] = Route((Piece(same, 1.0), Piece(minus, -1.0)), None, "tanhmax")
    routes[A.SignExp] = Route((Piece(signexp_pos, 1.0), Piece(signexp_neg, -1.0)), None, "signexp")
    routes[A.Linear] = Route((Piece(asinh_pos, 1.0), Piece(asinh_neg, -1.0)), "count", "linear")
    routes[A.ReLU] = Route((Piece(pos, 1.0),), "count", "relu")
    return routes


def route(activation) -> Route:
    """The :class:`Route` of a built-in activation (a name from ``refattn.ACTIVATIONS`` or an instance of a
    built-in class), or ``activation`` itself if it is a Route (from :func:`formula`)."""
    if isinstance(activation, Route):
        return activation
    act = A.activation(activation) if isinstance(activation, str) else activation
    routes = _builtin_routes()
    if type(act) not in routes:
        raise TypeError(f"activation: no softmax-kernel route for {act!r}; give a built-in's name or write "
                        f"its ell and rho as torch functions with refattn.flex.formula")
    return routes[type(act)]


def formula(ell=None, rho=None, *, bounded=False, name="formula") -> Route:
    """The route of a user's activation ``phi = rho(s) softmax(ell(s))`` (Eq. 01.R1; derivation 24, section 5).

    Parameters
    ----------
    ell : function of a score tensor, ``log h``, written with torch operations (``-inf`` where ``h = 0``);
        ``None`` for ``h = 1``
    rho : function of a score tensor, ``g / h``; ``None`` for ``rho = 1``
    bounded : bool, ``|rho| <= 1`` everywhere: one call over the keys twice (Eq. 24.P) instead of two
        calls (Eq. 24.U). A ``rho`` above 1 makes ``log((1 - rho)/2)`` NaN, and NaN reaches the output.
    name : str, for messages

    Returns
    -------
    Route
    """
    for arg, f in (("ell", ell), ("rho", rho)):
        if f is not None and not callable(f):
            raise TypeError(f"{arg}: expected a function of the scores (a torch function), got {type(f).__name__}")
    import torch  # noqa: PLC0415  (the torch extra)

    def log_h(s):
        return torch.zeros_like(s) if ell is None else ell(s)

    if rho is None:
        return Route((Piece(log_h, 1.0),), None, name)
    if bounded:
        def upper(s):
            return log_h(s) + _log_pos(torch, (1.0 + rho(s)) * 0.5)  # log((h + g)/2)

        def lower(s):
            return log_h(s) + _log_pos(torch, (1.0 - rho(s)) * 0.5)  # log((h - g)/2)

        return Route((Piece(upper, 1.0), Piece(lower, -1.0)), None, name)

    def g_pos(s):
        return log_h(s) + torch.asinh(0.5 * rho(s))  # g = h (e^x - e^-x), x = asinh(rho / 2)  (Eq. 24.U2)

    def g_neg(s):
        return log_h(s) - torch.asinh(0.5 * rho(s))

    return Route((Piece(g_pos, 1.0), Piece(g_neg, -1.0)), "count" if ell is None else ell, name)


# --------------------------------------------------------------------------
# The kernels: one call O, L = K(q, [k; k], [v; -v]; t) (Eq. 24.K1)
# --------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _score_mod(pieces, n_k):
    """FlexAttention's ``score_mod`` for a call over ``len(pieces)`` copies of ``n_k`` keys: piece ``c`` on
    the keys ``c n_k <= kv < (c + 1) n_k`` (cached, so that PyTorch's compiler sees one function per route)."""
    import torch  # noqa: PLC0415

    def score_mod(s, b, h, q_idx, kv_idx):
        t = pieces[0].t(s)
        for c in range(1, len(pieces)):
            t = torch.where(kv_idx >= c * n_k, pieces[c].t(s), t)
        return t

    return score_mod


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    import torch  # noqa: PLC0415
    from torch.nn.attention.flex_attention import flex_attention  # noqa: PLC0415

    return torch.compile(flex_attention, dynamic=False)


def _dense_call(torch, q, k, v, score_mod, keep, scale):
    """``(O, L)`` of Eq. 24.K1 with the scores formed: ``t = score_mod(scale q k^T)``, ``-inf`` where not
    kept; ``O = 0`` and ``L = -inf`` on a row with no kept finite ``t``. Differentiable by autograd (the
    where-guards keep every gradient finite)."""
    B, H, n_q, N = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    s = scale * (q @ k.transpose(-1, -2))  # (B, H, n_q, N)
    idx = [torch.arange(m, device=q.device).view([m if a == i else 1 for a in range(4)])
           for i, m in enumerate((B, H, n_q, N))]
    t = score_mod(s, *idx)  # (B, H, n_q, N)
    if keep is not None:
        t = torch.where(keep, t, -math.inf)
    m = t.detach().amax(-1, keepdim=True)  # (B, H, n_q, 1) the shift (NaN stays NaN)
    m = torch.where(m == -math.inf, 0.0, m)
    e = torch.exp(t - m)
    z = e.sum(-1, keepdim=True)
    pos = z > 0
    L = torch.where(pos, m + torch.log(torch.where(pos, z, 1.0)), -math.inf)[..., 0]  # (B, H, n_q)
    return (e / torch.where(pos, z, 1.0)) @ v, L  # (B, H, n_q, d_v), (B, H, n_q)


def _flex_call(torch, kernel, q, k, v, score_mod, block_mask, scale, need_lse):
    from torch.nn.attention.flex_attention import AuxRequest, flex_attention  # noqa: PLC0415

    fn = _compiled_flex() if kernel == "compiled" else flex_attention
    if need_lse:
        out, aux = fn(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale,
                      return_aux=AuxRequest(lse=True))
        return out, aux.lse
    return fn(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale), None


def _call(torch, kernel, pieces, q, k, v, keep, block_mask, scale, need_lse):
    """One softmax-kernel call over the keys once per piece, values signed per piece: ``(O, L)``."""
    n_k = k.shape[2]
    if len(pieces) > 1:
        k = torch.cat([k] * len(pieces), dim=2)  # (B, H, P n_k, d)
        v = torch.cat([v if p.sign > 0 else -v for p in pieces], dim=2)  # (B, H, P n_k, d_v)
    score_mod = _score_mod(tuple(pieces), n_k)
    if kernel == "dense":
        keep = None if keep is None else torch.cat([keep] * len(pieces), dim=-1)
        return _dense_call(torch, q, k, v, score_mod, keep, scale)
    return _flex_call(torch, kernel, q, k, v, score_mod, block_mask(len(pieces)), scale, need_lse)


# --------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------


def attention(q, k, v, *, activation="softmax", score="scaled_dot", score_options=None, mask=None,
              causal=False, kernel=None):
    """Attention ``phi(score(q, k)) v`` (TanhMax Eqs. 1-2) by softmax-kernel calls (derivation 24).

    Parameters
    ----------
    q, k, v : tensors ``(B, H, n_q, d)``, ``(B, H, n_k, d)``, ``(B, H, n_k, d_v)``, float32 or float64, on
        one device (FlexAttention takes 4-D inputs)
    activation : a built-in's name or instance, or a :class:`Route` from :func:`formula`
    score : ``"scaled_dot"`` or ``"dot"`` (or a :class:`refattn.core.scores.Score` of those): the kernel
        forms ``beta q.k`` itself, so no other score can go this way (derivation 24, section 7)
    mask : bool tensor broadcastable to ``(B, H, n_q, n_k)``, True keeps; optional
    causal : bool, also hide keys ``j > i`` (``n_q == n_k``)
    kernel : ``"compiled"``, ``"eager"`` or ``"dense"`` (:data:`KERNELS`; what each supports: :data:`SUPPORT`);
        None: ``"compiled"`` on a CUDA device, ``"eager"`` on the CPU

    Returns
    -------
    y : tensor ``(B, H, n_q, d_v)``, differentiable wherever the kernel has a backward. A query or key
        that is not finite makes every row that sees it NaN, a value that is not finite its column
        (as the textbook: derivation 01, section 4.4), whatever the kernel does with it.
    """
    import torch  # noqa: PLC0415  (the torch extra)

    rt, scale, mask, kernel = _checked(torch, q, k, v, activation, score, score_options, mask, causal, kernel)
    if q.device.type == "cpu" and kernel != "dense" and not torch.is_grad_enabled():
        q, k, v = q.detach(), k.detach(), v.detach()  # FlexAttention refuses them even under no_grad
    B, H, n_q, n_k = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    keep = _keep(torch, mask, causal, n_q, n_k, q.device) if kernel == "dense" else None

    def block_mask(copies):
        return _block_mask(torch, mask, causal, n_q, n_k, copies, q.device)

    need_lse = rt.normaliser is not None
    out, lse = _call(torch, kernel, rt.pieces, q, k, v, keep, block_mask, scale, need_lse)
    if rt.normaliser == "count":  # h = 1: y = O e^L / n_i  (Eq. 24.U)
        n = _counts(torch, mask, causal, n_q, n_k, q)  # (B?, H?, n_q)
        ok = n > 0
        r = torch.where(ok, torch.exp(lse) / torch.where(ok, n, 1.0), 0.0)
        out = out * r[..., None]
    elif rt.normaliser is not None:  # y = O e^(L - L_h), L_h from a call with t = ell  (Eq. 24.U)
        _, lse_h = _call(torch, kernel, (Piece(rt.normaliser, 1.0),), q, k, v, keep, block_mask, scale, True)
        ok = lse_h > -math.inf
        r = torch.where(ok, torch.exp(torch.where(ok, lse - lse_h, 0.0)), 0.0)
        out = out * r[..., None]
    if q.device.type == "cpu" and kernel != "dense" and out.requires_grad:
        raise NotImplementedError("activation: a tensor its functions capture requires grad, and PyTorch's "
                                  "FlexAttention has no backward on the CPU; pass kernel='dense' for "
                                  "gradients on the CPU, or run on a CUDA device")
    return out + _not_finite(torch, q, k, v, mask, causal, n_q)


def _not_finite(torch, q, k, v, mask, causal, n_q):
    """0, or NaN where the textbook's output is NaN because of a query, key or value that is not finite:
    a row that sees a bad query or key, a column with a bad value (derivation 01, section 4.4). Added to
    the output, so it passes every gradient through unchanged."""
    bad_q = ~torch.isfinite(q).all(-1)  # (B, H, n_q)
    bad_k = ~torch.isfinite(k).all(-1)  # (B, H, n_k)
    if mask is not None:
        seen = (_keep(torch, mask, causal, n_q, k.shape[2], q.device) & bad_k[..., None, :]).any(-1)
    elif causal:
        seen = torch.cummax(bad_k.to(torch.uint8), dim=-1).values.bool()  # row i sees keys j <= i
    else:
        seen = bad_k.any(-1, keepdim=True)  # every row sees every key
    bad_rows = (bad_q | seen)[..., None]  # (B, H, n_q, 1)
    bad_cols = ~torch.isfinite(v).all(-2, keepdim=True)  # (B, H, 1, d_v)
    return torch.where(bad_rows | bad_cols, math.nan, 0.0).to(q.dtype)


def _keep(torch, mask, causal, n_q, n_k, device):
    """The keys each query keeps, a bool tensor broadcastable to ``(B, H, n_q, n_k)``, or None for all."""
    keep = None if mask is None else mask
    if causal:
        tri = torch.ones((n_q, n_k), dtype=torch.bool, device=device).tril()
        keep = tri if keep is None else keep & tri
    return keep


def _counts(torch, mask, causal, n_q, n_k, like):
    """The number of keys each query keeps, in ``like``'s dtype: ``(B?, H?, n_q)``."""
    if mask is not None:
        return _keep(torch, mask, causal, n_q, n_k, like.device).sum(-1).to(like.dtype)
    if causal:
        return torch.arange(1, n_q + 1, device=like.device, dtype=like.dtype)
    return torch.full((n_q,), float(n_k), device=like.device, dtype=like.dtype)


def _block_mask(torch, mask, causal, n_q, n_k, copies, device):
    """FlexAttention's block mask for a call over ``copies`` copies of the keys (key ``kv`` is key
    ``kv mod n_k``), or None when every key is kept."""
    if mask is None and not causal:
        return None
    from torch.nn.attention.flex_attention import create_block_mask  # noqa: PLC0415

    m4 = None if mask is None else mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    sb = 0 if m4 is None or m4.shape[0] == 1 else 1
    sh = 0 if m4 is None or m4.shape[1] == 1 else 1

    def mask_mod(b, h, q_idx, kv_idx):
        j = kv_idx % n_k
        keep = (j <= q_idx) if causal else (j >= 0)
        if m4 is not None:
            keep = keep & m4[b * sb, h * sh, q_idx, j]
        return keep

    B = None if m4 is None or m4.shape[0] == 1 else m4.shape[0]
    H = None if m4 is None or m4.shape[1] == 1 else m4.shape[1]
    return create_block_mask(mask_mod, B, H, n_q, copies * n_k, device=device)


# --------------------------------------------------------------------------
# The checks of attention's arguments (plumbing: the mathematics is above)
# --------------------------------------------------------------------------


def _checked(torch, q, k, v, activation, score, score_options, mask, causal, kernel):
    """Check :func:`attention`'s arguments, before any work; return ``(route, scale, mask, kernel)``."""
    if kernel is not None and kernel not in KERNELS:
        raise ValueError(f"kernel: expected one of {KERNELS} or None, got {kernel!r}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(f"{name}: expected a 4-D tensor (B, H, n, d), as FlexAttention takes it, "
                             f"got shape {tuple(x.shape)}")
        if x.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{name}: expected float32 or float64 (the textbook's dtypes), got {x.dtype}")
        if x.dtype != q.dtype or x.device != q.device:
            raise TypeError(f"{name}: {x.dtype} on {x.device}, but q is {q.dtype} on {q.device}; "
                            f"give q, k and v one dtype and one device")
    if k.shape[:2] != q.shape[:2] or v.shape[:2] != q.shape[:2] or k.shape[-1] != q.shape[-1] \
            or v.shape[2] != k.shape[2]:
        raise ValueError(f"v: shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not fit "
                         f"(B, H, n_q, d), (B, H, n_k, d), (B, H, n_k, d_v)")
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected True or False, got {type(causal).__name__}")
    if causal and q.shape[2] != k.shape[2]:
        raise ValueError(f"causal: needs as many queries as keys, got n_q={q.shape[2]}, n_k={k.shape[2]}")
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError(f"mask: expected a bool tensor (True keeps), got "
                            f"{getattr(mask, 'dtype', type(mask).__name__)}")
        if mask.device != q.device:
            raise TypeError(f"mask: on {mask.device}, but q is on {q.device}")
        target = tuple(q.shape[:2]) + (q.shape[2], k.shape[2])
        if mask.dim() > 4 or any(m not in (1, t) for m, t in zip(reversed(mask.shape), reversed(target))):
            raise ValueError(f"mask: shape {tuple(mask.shape)} does not broadcast to (B, H, n_q, n_k) = {target}")
    if score_options and isinstance(score, Score):
        raise ValueError("score_options: give options only with a score name, not a Score instance")
    sc = score if isinstance(score, Score) else get_score(score, **(score_options or {}))
    if not isinstance(sc, Dot):
        raise ValueError(f"score: the softmax kernel forms beta q.k itself; {sc.name!r} is not a dot product "
                         f"(derivation 24, section 7): use 'dot' or 'scaled_dot'")
    rt = route(activation)
    if kernel is None:
        kernel = "compiled" if q.device.type == "cuda" else "eager"
    if q.device.type == "cpu" and kernel == "compiled":
        raise NotImplementedError("kernel: PyTorch's compiled FlexAttention on the CPU returned wrong rows for "
                                  "masked calls in this project's tests; pass kernel='eager' or kernel='dense', "
                                  "or run on a CUDA device")
    if q.device.type == "cpu" and kernel != "dense":
        if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
            raise NotImplementedError(f"kernel: PyTorch's FlexAttention has no backward on the CPU; pass "
                                      f"kernel='dense' for gradients on the CPU, call under torch.no_grad(), or "
                                      f"run on a CUDA device ({SUPPORT['cpu', kernel]})")
    return rt, sc.beta_for(q.shape[-1]), mask, kernel


# --------------------------------------------------------------------------
# The rounding bound of one kernel call (Eq. 24.E)
# --------------------------------------------------------------------------


def kernel_error(u, d, scale, qk_abs, t, dt, L, P):
    """Eq. 24.E: bounds on the rounding errors of one softmax-kernel call, per query row.

    Parameters
    ----------
    u : float, the unit roundoff of the kernel's dtype (``2^-24`` float32, ``2^-53`` float64)
    d : int, the length of the dot products
    scale : float, the score's ``beta``
    qk_abs : array (..., n_q, N), ``sum_l |q_il| |k_jl|``
    t, dt : arrays (..., n_q, N), the modified score ``t(s)`` and its derivative ``t'(s)``, exactly
    L : array (..., n_q), the call's exact log-sum-exp
    P : array (..., n_q, N), the call's exact weights ``e^(t - L)`` (0 where not kept)

    Returns
    -------
    (e_out, e_lse) : arrays (..., n_q). ``|O_computed - O| <= e_out max_j |v_j|`` in every column of
    the row and ``|L_computed - L| <= e_lse``, to first order in ``u``, if the kernel evaluates ``t``
    with an absolute error of at most ``u (8 |t| + 3)`` and each exponential to 1 ulp
    """
    xp = array_module(P)

    def gamma(k):
        return k * u / (1.0 - k * u)

    kept = P > 0
    top = xp.max(xp.where(kept, t, -np.inf), axis=-1, keepdims=True)  # the row maximum of t (the shift)
    top = xp.where(xp.isfinite(top), top, 0.0)
    t, dt = xp.where(kept, t, 0.0), xp.where(kept, dt, 0.0)
    delta = xp.abs(dt) * gamma(d + 1) * scale * qk_abs + u * (9.0 * xp.abs(t) + xp.abs(top) + 4.0)  # Eq. 24.E1
    spread = xp.sum(xp.where(kept, P * delta, 0.0), axis=-1)  # sum_j P_j delta_j
    n = P.shape[-1]
    return 2.0 * spread + 2.0 * gamma(n + 1), spread + gamma(n + 1) + u * xp.abs(xp.where(xp.isfinite(L), L, 0.0))
