"""The library's answers that the graders compare with, in one place.

Every backward pass the graders need from the library goes through the two
functions here, so that a change of the library's backward convention
touches this file only. Values (``act(s)``, ``sc(q, k, params)``) are read
directly by the graders.
"""

from __future__ import annotations

from ..core.activations import activation
from ..core.scores import score

__all__ = ["activation_vjp", "score_vjp"]


def activation_vjp(name_or_act, s, u, mask=None):
    """``u^T d phi / d s`` along the last axis: the activation's own backward pass (Eq. 01.R4)."""
    act = activation(name_or_act) if isinstance(name_or_act, str) else name_or_act
    return act.backward(u, act.forward(s, mask=mask)[1])


def score_vjp(name, q, k, params, grad_s):
    """``(dq, dk, dparams)`` of the score function ``name`` (``derivations/02-scores.md``)."""
    sc = score(name)
    return sc.backward(grad_s, sc.forward(q, k, params)[1])
