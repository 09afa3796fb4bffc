"""refattn: a NumPy-from-scratch reference for attention beyond softmax.

Every activation is a reweighted softmax ``phi = rho(s) * softmax(ell(s))``
with a hand-derived gradient beside it, checked against autograd and central
differences (``derivations/01-reweighted-softmax.md``); every score function
likewise (``derivations/02-scores.md``). The textbook is :mod:`refattn.core`:
read it in order, activations, scores, attention, gradcheck, then the plumbing.

The front door:

* ``attention(Q, K, V, score=..., activation=...)`` and ``attention_backward``;
* ``activation(name)``, ``ACTIVATIONS``, ``Activation``; ``score(name)``,
  ``SCORES``, ``Score``;
* ``gradcheck``, a VJP against autograd and central differences;
* ``define_activation(name, g, h)``, an activation of your own (``docs/verify.md``).

The rest, by folder: :mod:`refattn.theory` (the papers' propositions),
:mod:`refattn.fast` (the same numbers, faster), :mod:`refattn.training`,
:mod:`refattn.studies` (the papers' experiments), :mod:`refattn.exercises`;
:mod:`refattn.torch` and :mod:`refattn.jax` run the textbook in PyTorch and JAX.
"""

__version__ = "0.1.0"

#: The front door's names and the module that defines each.
_FRONT_DOOR = {"attention": "core.attention", "attention_backward": "core.attention",
               "activation": "core.activations", "ACTIVATIONS": "core.activations", "Activation": "core.activations",
               "score": "core.scores", "SCORES": "core.scores", "Score": "core.scores",
               "gradcheck": "core.gradcheck", "define_activation": "custom"}
_SUBMODULES = ("core", "theory", "fast", "training", "studies", "exercises", "custom", "check", "cli", "plots",
               "torch", "jax", "frameworks")
__all__ = [*_FRONT_DOOR, "__version__"]


def __getattr__(name):
    """Load a name on first use (PEP 562): ``import refattn.core.attention`` then loads nothing outside
    the textbook, and the ``refattn`` command starts (and answers Ctrl-C) before NumPy is imported."""
    import importlib  # noqa: PLC0415

    if name in _FRONT_DOOR:
        globals()[name] = getattr(importlib.import_module(f".{_FRONT_DOOR[name]}", __name__), name)
        return globals()[name]  # found directly from now on
    if name not in _SUBMODULES:
        raise AttributeError(f"module 'refattn' has no attribute {name!r}")
    for where in set(_FRONT_DOOR.values()):  # refattn.core.attention works after `import refattn`
        if where.startswith(name + "."):
            importlib.import_module(f".{where}", __name__)
    return importlib.import_module(f".{name}", __name__)


def __dir__():
    return sorted(set(globals()) | set(__all__))
