"""refattn: a NumPy-from-scratch reference for attention beyond softmax.

Every activation is a reweighted softmax ``phi = rho(s) * softmax(ell(s))``
with a hand-derived gradient beside it, checked against autograd and central
differences (``derivations/01-reweighted-softmax.md``); every score function
(``derivations/02-scores.md``) likewise.
"""

from .activations import ACTIVATIONS, Activation, activation
from .custom import define_activation
from .scores import SCORES, Score, score

__version__ = "0.1.0"

__all__ = ["ACTIVATIONS", "Activation", "activation", "define_activation", "SCORES", "Score", "score",
           "__version__"]
