"""What tables, plots, checks and studies read about an activation or a score, kept off the textbook classes.

The classes in ``refattn/core`` hold the mathematics. What is said *about*
each one lives here, in one table per kind:

* the formula texts of ``g, h, rho, ell`` (``refattn/core/activations.py``'s
  table, for printed tables and plot titles);
* its singular points: where ``phi`` (or a score) is not differentiable and
  why, and the score values at which an entry makes it so (``refattn check``
  flags them; ``define_activation`` leaves them out of its derivative check);
* its regularity near 0 (``"smooth"``, ``"kink"``: ``rho`` or ``ell'`` jumps
  at 0 but is constant on each side, ``"log"``: ``ell`` is the log of a power
  of ``s``), which rank collapse's first-order expansion reads
  (``derivations/16-rank-collapse.md``);
* whether ``phi(s + c) = phi(s)`` for every constant ``c`` (softmax only).

:func:`about` returns an activation's entry; a user's activation
(``refattn.define_activation``) carries its own (``act.about``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import activations as A

__all__ = ["About", "about", "score_singular"]


@dataclass(frozen=True)
class About:
    """The catalogue's entry for one activation."""

    g: str  #: g(s) as text
    h: str  #: h(s) as text
    rho: str  #: rho = g / h as text
    ell: str  #: ell = log h as text
    singular: tuple = ()  #: (where, why) for each point where phi is not differentiable
    singular_scores: tuple = ()  #: score values at which an entry makes phi non-differentiable
    regularity: str = "log"  #: "smooth", "kink" or "log" (the most cautious)
    shift_invariant: bool = False  #: phi(s + c) = phi(s) for every constant c


_ACTIVATIONS = {
    A.Softmax: About("exp(s)", "exp(s)", "1", "s", regularity="smooth", shift_invariant=True),
    A.TanhMax: About("sinh(s)", "cosh(s)", "tanh(s)", "log cosh(s)", regularity="smooth"),
    A.SignExp: About("sign(s) exp|s|", "exp|s|", "sign(s)", "|s|", singular_scores=(0.0,), regularity="kink",
                     singular=(("s = 0", "rho = sign(s) jumps: a Dirac term in the derivative; analytic and "
                                "autograd use rho'(0) = 0, differences see the jump"),)),
    A.Expressive: About("s^2/(1+s^2)", "s^2/(1+s^2)", "1", "log(s^2/(1+s^2))",
                        singular=(("all-zero row", "h = 0 everywhere: no normaliser; weights and gradient "
                                   "set to 0"),)),
    A.SigSoftmax: About("exp(s) sigmoid(s)", "exp(s) sigmoid(s)", "1", "s - softplus(-s)", regularity="smooth"),
    A.Sigmoid: About("sigmoid(s)", "sigmoid(s)", "1", "-softplus(-s)", regularity="smooth"),
    A.Linear: About("s", "1", "s", "0", regularity="smooth"),
    A.ReLU: About("max(s, 0)", "1", "max(s, 0)", "0", singular_scores=(0.0,), regularity="kink",
                  singular=(("s = 0", "kink: rho'(0) = 0, the left slope; differences see 1/2, the mean "
                             "of the two"),)),
    A.CosFormerNorm: About("max(s, 0)", "max(s, 0)", "1", "log max(s, 0)", singular_scores=(0.0,),
                           singular=(("s = 0", "kink: differences see the average of the two one-sided slopes"),
                                     ("row with no positive score", "no normaliser; weights and gradient set "
                                      "to 0"))),
}


def about(act) -> About:
    """The catalogue's entry for the activation ``act`` (a built-in, or a user's carrying ``act.about``)."""
    if type(act) in _ACTIVATIONS:
        return _ACTIVATIONS[type(act)]
    own = getattr(act, "about", None)
    if isinstance(own, About):
        return own
    return About("g(s)", "h(s)", "g/h", "log h")  # an Activation subclass nobody described: the cautious defaults


def score_singular(sc) -> tuple:
    """``(where, why)`` for each point where the score ``sc`` is not differentiable."""
    relu_kink = "relu kink: relu'(0) = 0 by convention; differences see 1/2"
    if sc.name == "cosformer":
        return (("q or k entry = 0", relu_kink),)
    if sc.name == "neural" and sc.hidden == "relu":
        return (("hidden pre-activation z = 0", relu_kink),)
    return ()
