"""The small models the experiments train, each batched over seeds.

Every model follows the trainer's protocol (``refattn.training.train``): parameters
are a dict of arrays with a leading seed axis ``S`` (``S`` independent models
trained as one array program), ``loss(params, batch)`` is written against
:func:`refattn.core.backend.array_module` so that autograd can trace it, and
``loss_and_grad(params, batch)`` returns the same loss with its hand-derived
gradient. Besides attention (:mod:`refattn.attention`, :mod:`refattn.core.scores`)
they are built from the shared layers of :mod:`refattn.training.layers` (linear maps,
relu, layer norm, the losses; ``derivations/21-layers.md``).

* :mod:`refattn.training.models.polarity` -- TanhMax's one-attention polarity
  classifier (section 5.1), with the ``self``, ``global`` and ``additive``
  per-token scores and any registered activation;
* :mod:`refattn.training.models.nt` -- Expressive's one-bilayer transformer for the NT
  tasks (section 4), one attention head per context position;
* :mod:`refattn.training.models.decoder` -- a multi-layer decoder language model with
  one activation (and score) per layer: the Cog hybrid and NeuralAttn's
  Neural-Attention-in-layer-0 hybrid (``derivations/18-decoder-and-cog.md``).
"""

from .decoder import DecoderLM, cog_hybrid, neural_first
from .nt import NTModel, count_params
from .polarity import SCORE_KINDS, PolarityClassifier, dropout_mask

__all__ = ["SCORE_KINDS", "PolarityClassifier", "dropout_mask", "NTModel", "count_params", "DecoderLM", "cog_hybrid",
           "neural_first"]
