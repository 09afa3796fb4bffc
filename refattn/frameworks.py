"""What :mod:`refattn.torch` and :mod:`refattn.jax` share: core's forward and backward as one operation.

A framework's custom-gradient mechanism (``torch.autograd.Function``,
``jax.custom_vjp``) needs two functions: the forward, which also returns what
the backward keeps, and the backward, one gradient per input. The textbook
has exactly these (``out, cache = forward(inputs)``, ``grads =
backward(grad_out, cache)``), so an operation here is a pair of calls into
``refattn/core`` with the static arguments (activation, axis, score, causal)
bound, and nothing else: no formula is written twice. The framework's arrays
run through core's own lines, on PyTorch's or JAX's namespace
(:func:`refattn.core.backend.array_module`), an activation from
:func:`refattn.define_activation` too, when its functions are written against
that namespace (``g(s, xp)``). Both wrappers compute float16 and bfloat16 in
float32 and round the results back (:data:`HALF_NOTE`); the backward being
written in the framework's own operations is what makes second derivatives
exact (``docs/frameworks.md``, "Second derivatives").
"""

from __future__ import annotations

from .core import activations as _activations
from .core.activations import Activation
from .core.attention import attention as _attention, attention_backward
from .core.scores import Score, score as _get_score
from .custom import UserActivation

__all__ = ["ActivationOp", "AttentionOp", "resolve_activation", "weights_function", "check_score", "one_dtype",
           "split", "join", "HALF_NOTE"]

#: How float16 and bfloat16 inputs are computed, for messages and docstrings.
HALF_NOTE = "float16 and bfloat16 are computed in float32 and rounded back"


def resolve_activation(name_or_activation, argument="name_or_activation", library=None) -> Activation:
    """The activation: a name from ``refattn.ACTIVATIONS`` (or one registered by ``define_activation``), or an
    :class:`~refattn.core.activations.Activation` object, such as one from ``refattn.define_activation``;
    for ``library`` (``"PyTorch"``, ``"JAX"``), one from ``define_activation`` must be written against an
    array namespace (``g(s, xp)``), else one line says how (``docs/verify.md``, section 1)."""
    if isinstance(name_or_activation, Activation):
        act = name_or_activation
    elif not isinstance(name_or_activation, str):
        raise TypeError(f"{argument}: expected an activation's name or an Activation (refattn.activation, "
                        f"refattn.define_activation), got {type(name_or_activation).__name__}")
    else:
        try:
            act = _activations.activation(name_or_activation)
        except ValueError as exc:
            raise ValueError(f"{argument}: {str(exc).split(': ', 1)[1]}") from None
    if library is not None and isinstance(act, UserActivation) and not act.native:
        raise TypeError(f"{argument}: {act.numpy_only(library)}")
    return act


def one_dtype(arrays, convert):
    """The dtype that all of ``arrays`` (``{name: array or None}``) share, or a ``TypeError`` naming the first
    that differs from the first one's; ``convert`` says how to convert (``".to(torch.float32)"``). An array of
    another library is left to core, which names the mix (:func:`refattn.core.backend.array_module`)."""
    first = None
    for name, x in arrays.items():
        if x is None:
            continue
        if first is None:
            first = name, x.dtype, type(x)
        elif x.dtype != first[1] and isinstance(x, first[2]):
            raise TypeError(f"{name}: dtype {x.dtype} differs from {first[0]}'s {first[1]}; give the queries, keys, "
                            f"values and parameters one dtype (convert with {name}{convert.format(first[1])})")
    return None if first is None else first[1]


class ActivationOp:
    """``phi, cache = act.forward(s, axis, mask)`` and ``ds = act.backward(dphi, cache)`` (Eqs. 01.R1, 01.R4).

    Inputs ``(s, mask)``; one gradient per input, ``None`` for the mask.
    """

    def __init__(self, act, axis):
        self.act, self.axis = act, axis

    def forward(self, s, mask):
        return self.act.forward(s, self.axis, mask)

    def backward(self, grad_phi, cache):
        return self.act.backward(grad_phi, cache), None


class AttentionOp:
    """``out, cache = attention(q, k, v, ...)`` and ``dq, dk, dv, dparams = attention_backward(dout, cache)``.

    Inputs ``(q, k, v, mask, *params)``, the score's parameters in the order
    of ``names``; one gradient per input (``None`` for the mask, and for
    ``q`` where it is ``None``, as for the ``global`` score).
    """

    def __init__(self, score, act, causal, names):
        self.score, self.act, self.causal, self.names = score, act, causal, tuple(names)

    def forward(self, q, k, v, mask, *params):
        return _attention(q, k, v, score=self.score, activation=self.act, params=dict(zip(self.names, params)),
                          mask=mask, causal=self.causal)

    def backward(self, grad_out, cache):
        dq, dk, dv, dparams = attention_backward(grad_out, cache)
        return (dq, dk, dv, None) + tuple(dparams[n] for n in self.names)


def weights_function(name_or_activation, run, library):
    """``phi(s, dim=-1, mask=None)``, which returns ``run(ActivationOp(act, dim), s, mask)``: what
    ``refattn.torch.activation`` and ``refattn.jax.activation`` return (``phi.activation`` is ``act``)."""
    act = resolve_activation(name_or_activation, library=library)

    def phi(s, dim=-1, mask=None):
        return run(ActivationOp(act, dim), s, mask)

    phi.__name__ = phi.__qualname__ = act.name or "activation"
    phi.__doc__ = f"The weights of {act!r} along ``dim`` (core's forward, Eq. 01.R1; its VJP, Eq. 01.R4)."
    phi.activation = act
    return phi


def check_score(score, score_options):
    """The score as a :class:`~refattn.core.scores.Score` (``score_options`` only with a name)."""
    if isinstance(score, Score):
        if score_options:
            raise ValueError("score_options: give options only with a score name, not a Score instance")
        return score
    return _get_score(score, **(score_options or {}))


# --- A cache as arrays and a skeleton: the frameworks keep arrays, and everything else beside them ----
class Slot:
    """The place of the ``index``-th array in a cache's skeleton."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index


def split(cache, is_array):
    """``(arrays, skeleton)``: the arrays of a nested dict ``cache`` in order, and the dict with each
    replaced by its :class:`Slot`; :func:`join` puts them back."""
    arrays = []

    def walk(x):
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if is_array(x):
            arrays.append(x)
            return Slot(len(arrays) - 1)
        return x

    return arrays, walk(cache)


def join(skeleton, arrays):
    """The cache that :func:`split` took apart."""
    if isinstance(skeleton, dict):
        return {k: join(v, arrays) for k, v in skeleton.items()}
    return arrays[skeleton.index] if isinstance(skeleton, Slot) else skeleton
