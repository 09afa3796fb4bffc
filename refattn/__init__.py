"""refattn: a NumPy-from-scratch reference for attention beyond softmax.

The textbook is :mod:`refattn.core` (read it in order: backend, checks,
activations, scores, attention, gradcheck). Every activation is a reweighted
softmax ``phi = rho(s) * softmax(ell(s))`` with a hand-derived gradient beside
it, checked against autograd and central differences
(``derivations/01-reweighted-softmax.md``); every score function
(``derivations/02-scores.md``) likewise.

The rest of the package, by folder: :mod:`refattn.theory` (the papers'
propositions as code), :mod:`refattn.fast` (the same mathematics, faster:
blocks, threads, streaming), :mod:`refattn.training` (optimisers, the trainer,
layers, models, tasks, results files), :mod:`refattn.studies` (the papers'
experiments, one module each) and :mod:`refattn.exercises` (graded exercises).
"""

from .core.activations import ACTIVATIONS, Activation, activation
from .core.attention import attention, attention_backward
from .core.gradcheck import gradcheck
from .core.scores import SCORES, Score, score

__version__ = "0.1.0"

__all__ = ["attention", "attention_backward", "activation", "score", "gradcheck", "define_activation",
           "ACTIVATIONS", "Activation", "SCORES", "Score", "__version__"]


def __getattr__(name):
    # define_activation lives in refattn.custom, loaded on first use, so that importing the
    # textbook (refattn.core) loads nothing of refattn outside it
    if name == "define_activation":
        from .custom import define_activation  # noqa: PLC0415

        return define_activation
    raise AttributeError(f"module 'refattn' has no attribute {name!r}")
