"""The classifier trainer several studies share (refattn.training.classifier): the hand-derived backward
pass and autograd train TanhMax's classifier along the same trajectory."""

import numpy as np
import pytest

from refattn.training.classifier import train_classifier
from refattn.training.tasks.polarity import PolarityConfig, make_polarity

TINY = PolarityConfig(n_pos=10, n_neg=10, n_neutral=80, n_per_class=400, seed=1)


@pytest.mark.parametrize("act,score,opt,lr", [("tanhmax", "self", "adadelta", 1.0), ("signexp", "global", "sgd", 0.05),
                                              ("expressive", "additive", "adam", 0.05)])
def test_classifier_trains_the_same_with_analytic_and_autograd_gradients(act, score, opt, lr):
    """On the real model: 20 optimiser steps (5 epochs x 4 batches, dropout on)
    with the hand-derived backward and with autograd agree to 1e-10 in float64."""
    data = make_polarity(TINY, rng=np.random.default_rng(0))
    tokens, labels = data.tokens[:200], data.labels[:200]
    runs = [train_classifier(tokens, labels, data.vocab_size, act, seeds=(0, 1), score=score, epochs=5,
                             batch_size=50, optimizer=opt, lr=lr, grad=g, progress=False) for g in ("analytic", "autograd")]
    (model, pa, oa), (_, pb, ob) = runs
    assert len(oa["history"]) == 5
    start = model.init_params((0, 1))
    moved = 0.0
    for k in pa:
        np.testing.assert_allclose(pa[k], pb[k], rtol=1e-10, atol=1e-12, err_msg=k)
        moved = max(moved, float(np.abs(pa[k] - start[k]).max()))
    assert moved > 1e-3  # training moved the parameters: the agreement is over a real trajectory
    np.testing.assert_allclose(oa["history"][-1]["loss"], ob["history"][-1]["loss"], rtol=1e-10)
