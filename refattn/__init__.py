"""refattn: a NumPy-from-scratch reference for attention beyond softmax.

The textbook is :mod:`refattn.core` (read it in order, the mathematics first:
activations, scores, attention, gradcheck; then the plumbing, backend and
checks). Every activation is a reweighted
softmax ``phi = rho(s) * softmax(ell(s))`` with a hand-derived gradient beside
it, checked against autograd and central differences
(``derivations/01-reweighted-softmax.md``); every score function
(``derivations/02-scores.md``) likewise.

The rest of the package, by folder: :mod:`refattn.theory` (the papers'
propositions as code), :mod:`refattn.fast` (the same mathematics, faster:
blocks, threads, streaming), :mod:`refattn.training` (optimisers, the trainer,
layers, models, tasks, results files), :mod:`refattn.studies` (the papers'
experiments, one module each) and :mod:`refattn.exercises` (graded exercises).
:mod:`refattn.torch` and :mod:`refattn.jax` (the ``torch`` and ``jax`` extras)
run the textbook's forward and hand-derived backward in PyTorch and JAX.
"""

__version__ = "0.1.0"

__all__ = ["attention", "attention_backward", "activation", "score", "gradcheck", "define_activation",
           "ACTIVATIONS", "Activation", "SCORES", "Score", "__version__"]

# Each name of the front door and the module that defines it. They are loaded on first use
# (PEP 562), so that ``import refattn.core.attention`` loads nothing of refattn outside the
# textbook, and the ``refattn`` command starts (and answers Ctrl-C) before NumPy is imported.
_WHERE = {"attention": "core.attention", "attention_backward": "core.attention", "activation": "core.activations",
          "ACTIVATIONS": "core.activations", "Activation": "core.activations", "score": "core.scores",
          "SCORES": "core.scores", "Score": "core.scores", "gradcheck": "core.gradcheck",
          "define_activation": "custom"}


#: The subpackages and modules, also loaded on first use (``refattn.core.attention`` after ``import refattn``).
_SUBMODULES = ("core", "theory", "fast", "training", "studies", "exercises", "custom", "check", "cli", "plots",
               "torch", "jax", "frameworks")


def __getattr__(name):
    import importlib  # noqa: PLC0415

    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value  # found directly from now on
        return value
    if name in _SUBMODULES:
        for where in sorted(set(_WHERE.values())):  # what the front door loads comes with it, as it always did
            if where.startswith(name + "."):
                importlib.import_module(f".{where}", __name__)
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'refattn' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
