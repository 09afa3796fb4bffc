"""What the tests of refattn.torch and refattn.jax share: their inputs, the NumPy reference, the tolerances.

Each test computes on NumPy (the reference: core's forward and hand-derived
backward, ``refattn.core``) and in the framework from the same inputs, and
compares norm-wise, ``max |framework - numpy| <= tol * max |numpy| + extra``
(:func:`refattn.core.gradcheck.compare`), as the GPU parity tests do:

* float64: ``tol = 1e-12``, ``extra = 0``. Both run the same lines of core on
  the same inputs; they differ only where the libraries' ``exp``, ``log1p``,
  ``tanh`` and summation orders round differently, a few units in the last
  place of the largest entry (2e-16 relative), so 1e-12 leaves room for
  sums over a few hundred terms and no room for a wrong formula.
* float32: ``tol = 1e-5`` (about 80 float32 ulps of the largest entry) plus
  four times NumPy's own float32 rounding error on the same problem,
  ``extra = 4 max |numpy32 - numpy64|``: two correct float32 computations each
  carry their own rounding error.

The libraries are optional (the ``torch`` and ``jax`` extras): the test files
call ``support.needs``, so that without them they skip with the reason, and
under ``REFATTN_EXTRAS_REQUIRED=1`` (CI) a missing library fails instead.
"""

from __future__ import annotations

import numpy as np

from refattn import ACTIVATIONS, SCORES, activation, score
from refattn.check import away_from_singular
from refattn.core.attention import attention, attention_backward
from refattn.core.gradcheck import compare

TOL = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-5}
ROUNDING_FACTOR = 4.0
#: the scores near +-1000 that every activation must keep finite (the papers' sinh/cosh overflow at 710)
EXTREME = (1000.0, -1000.0, 999.5, -999.25)

__all__ = ["ACTIVATIONS", "SCORES", "TOL", "EXTREME", "scores", "mask_with_empty_row",
           "reference_activation", "reference_attention", "attention_inputs", "assert_close"]


def scores(name, shape, rng, extreme=True, scale=2.0):
    """Random scores away from ``name``'s singular points; with ``extreme``, one row holds scores near
    +-1000 and the row after it one of them beside moderate ones."""
    s = away_from_singular(activation(name), scale * rng.standard_normal(shape))
    if extreme:
        row = s.reshape(-1, shape[-1])
        row[0, :len(EXTREME)] = EXTREME[:shape[-1]]
        row[1, 0] = EXTREME[0]
        s = row.reshape(shape)
    return s


def mask_with_empty_row(shape, rng):
    """A random boolean mask (True keeps) whose last row keeps nothing (no normaliser)."""
    mask = rng.random(shape) > 0.3
    mask.reshape(-1, shape[-1])[-1] = False
    return mask


def reference_activation(name, s, u, axis=-1, mask=None):
    """NumPy: the weights and the gradient of ``<u, phi(s)>`` (core's forward and Eq. 01.R4)."""
    act = activation(name) if isinstance(name, str) else name
    w, cache = act.forward(s, axis, mask)
    return w, act.backward(u, cache)


def attention_inputs(score_name, rng, shape=(2, 3, 5, 4), dtype=np.float64):
    """``(q, k, v, params)`` on NumPy for one score (``q`` is ``None`` for ``global``)."""
    sc = score(score_name)
    q, k, v = (rng.standard_normal(shape).astype(dtype) for _ in range(3))
    params = sc.init_params(shape[-1], rng, dtype=dtype)
    return (None if not sc.uses_q else q), k, v, params


def masked_score_case(score_name, rng):
    """One score's inputs with a mask holding an empty row, a random cotangent and tanhmax's reference:
    ``(q, k, v, params, mask, g, want, (dq, dk, dv, dparams))`` (``q`` is ``None`` for ``global``)."""
    q, k, v, params = attention_inputs(score_name, rng)
    n_q = q.shape[-2] if score_name not in ("self", "global") else 1  # self and global: one query row
    mask = mask_with_empty_row(k.shape[:-2] + (n_q, k.shape[-2]), rng)
    g = rng.standard_normal(k.shape[:-2] + (n_q, v.shape[-1]))
    want, grads = reference_attention(q, k, v, params, g, score=score_name, activation="tanhmax", mask=mask)
    return q, k, v, params, mask, g, want, grads


def reference_attention(q, k, v, params, grad_out=None, **options):
    """NumPy: the output and, for ``grad_out``, ``(dq, dk, dv, dparams)`` (core's attention_backward)."""
    out, cache = attention(q, k, v, params=params, **options)
    return out, (None if grad_out is None else attention_backward(grad_out, cache))


def assert_close(got, want, what, want64=None):
    """``got`` (a NumPy copy of the framework's result) equals ``want`` norm-wise within :data:`TOL`, plus
    four times NumPy's float32 rounding error where the float64 reference ``want64`` is given."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, got.dtype, want.shape, want.dtype)
    extra = 0.0 if want64 is None else ROUNDING_FACTOR * float(np.max(np.abs(want - want64), initial=0.0))
    c = compare(got, want, check="framework", arg=what, rtol=TOL[want.dtype], atol=extra)
    assert c.ok, (f"{what}: differs from NumPy by {c.max_abs:.3e} at {c.where} (max |numpy| = {c.scale:.3e}, "
                  f"relative {c.max_rel:.3e}; allowed {TOL[want.dtype]:g} relative + {extra:.2e})")
