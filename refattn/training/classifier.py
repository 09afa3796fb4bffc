"""TanhMax's classifier trained on token sequences, all seeds at once: the trainer several studies share.

:func:`train_classifier` trains :class:`refattn.training.models.polarity.PolarityClassifier`
with one of :data:`OPTIMISERS` through :func:`refattn.training.train.train` (batches and
dropout masks seeded by seed, epoch and batch), and :func:`classifier_memory` estimates
its peak memory before any work. The synthetic polarity experiment, the SST-2 runs, the
interpretability measures and the SST-2 sweep (:mod:`refattn.studies`) all train with it.
"""

from __future__ import annotations

import numpy as np

from ..custom import activation_label, activation_record
from .models.polarity import PolarityClassifier, dropout_mask
from .optim import SGD, Adadelta, Adagrad, Adam
from .train import batch_iterator, train

__all__ = ["OPTIMISERS", "train_classifier", "classifier_fingerprint", "classifier_memory"]


def _adadelta_code(params, lr=0.05):
    """TanhMax's public code: PyTorch's ``Adadelta(lr=0.05)`` (rho 0.9, eps 1e-6) on 100 x the mean BCE."""
    return Adadelta(params, lr=lr, rho=0.9, eps=1e-6, loss_scale=100.0)


#: Optimisers by name (``optimizer=``); ``"adadelta-code"`` is the setting of TanhMax's public code.
OPTIMISERS = {"adam": Adam, "adadelta": Adadelta, "adadelta-code": _adadelta_code, "adagrad": Adagrad, "sgd": SGD}


def train_classifier(tokens, labels, vocab_size, activation, *, seeds, mask=None, score="self", epochs=8,
                     batch_size=100, optimizer="adam", lr=1e-2, dropout=0.5, checkpoint=None, progress=None,
                     fingerprint_extra=None, grad="analytic", embed_dim=30, callbacks=()):
    """Train TanhMax's classifier on ``tokens (n, L)``, ``labels (n,)`` for every seed at once.

    Batch order is seeded by (seed, epoch), dropout masks by (seed, epoch,
    batch); ``mask (n, L)`` marks real tokens (padding False); the other
    arguments go to :func:`refattn.training.train.train`. Returns ``(model,
    params, train_output)``.
    """
    seeds = tuple(int(s) for s in seeds)
    tokens = np.asarray(tokens, dtype=np.int64)
    labels = np.asarray(labels, dtype=float)
    model = PolarityClassifier(vocab_size, activation=activation, score=score, dropout=dropout, embed_dim=embed_dim)
    params = model.init_params(seeds)
    opt = OPTIMISERS[optimizer](params, lr=lr)

    def make_batches(epoch):
        out = []
        for b, idx in enumerate(batch_iterator(len(tokens), batch_size, seeds=seeds, epoch=epoch)):
            batch = {"tokens": tokens[idx], "labels": labels[idx]}
            if mask is not None:
                batch["mask"] = mask[idx]
            if dropout > 0:
                rngs = [np.random.default_rng([s, epoch, b, 1]) for s in seeds]
                batch["dropout"] = dropout_mask(rngs, idx.shape[1], model.hidden_dim, dropout)
            out.append(batch)
        return out

    fp = classifier_fingerprint(activation, seeds=seeds, score=score, epochs=epochs, batch_size=batch_size,
                                optimizer=optimizer, lr=lr, dropout=dropout, n=len(tokens), embed_dim=embed_dim,
                                fingerprint_extra=fingerprint_extra)
    out = train(model, params, opt, make_batches, epochs=epochs, checkpoint=checkpoint, fingerprint=fp, grad=grad,
                callbacks=list(callbacks), progress=progress, label=activation_label(activation))
    return model, params, out


def classifier_fingerprint(activation, *, seeds, score, epochs, batch_size, optimizer, lr, dropout, n, embed_dim=30,
                           fingerprint_extra=None):
    """What a checkpoint of :func:`train_classifier` records of its run (``n`` training examples), and a
    resumed run must match: a study of several activations compares every activation's checkpoint
    with it before the first one trains (:func:`refattn.training.train.check_resumable`)."""
    return {"activation": activation_record(activation), "seeds": [int(x) for x in seeds], "score": score, "epochs": epochs, "lr": lr,
            "optimizer": optimizer, "batch_size": batch_size, "dropout": dropout, "n": int(n),
            **({"embed_dim": embed_dim} if embed_dim != 30 else {}), **(fingerprint_extra or {})}


def classifier_memory(seeds, tokens, embed_dim=30):
    """Bytes that training and evaluating TanhMax's classifier on ``tokens`` (padded) tokens needs
    at its peak, for ``seeds`` seeds at once, estimated before any work.

    Every array of the run carries the seed axis; the largest are the forward
    pass over the data set and the per-token means, about ``100 + 1.5 E`` bytes
    per token and seed (``E`` the embedding size) as tracemalloc measures them:
    240 at ``E = 30`` for the polarity data, 108 to 555 for SST-2 sentences at
    ``E`` = 4 to 300. The estimate allows ``200 + 4 E``
    (``tests/training/test_runs.py::test_memory_estimates_bound_the_measured_peaks``,
    ``tests/test_run_safety.py``).
    """
    return int(seeds) * int(tokens) * (200 + 4 * int(embed_dim)) + 8 * 2**20
