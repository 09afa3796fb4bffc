"""Divergence is data for an activation of your own, as for the built-ins.

Outside training an activation from ``define_activation`` is strict: a value
that is not finite raises, naming the activation, the quantity, the score, and
whose fault it is (the formula's at a finite score, the input's at one that
is not finite). Inside training (the models of :mod:`refattn.training`, which
take :func:`refattn.custom.divergence_as_data`'s copy) the same value makes
that seed's row NaN: its loss is not finite, it is recorded as diverged, and
the other seeds train on, bit for bit as they would alone.
"""

from __future__ import annotations

import autograd.numpy as anp
import numpy as np
import pytest

from refattn.core.attention import attention
from refattn.custom import NonFiniteError, define_activation, divergence_as_data
from refattn.studies.nt_training import Settings, make_batches, run_nt
from refattn.training.classifier import train_classifier
from refattn.training.models.nt import NTModel

#: Softmax written naively: h = e^s overflows above s = 709.78.
NAIVE = define_activation("naive_exp", anp.exp, anp.exp)


def test_strict_outside_training_blaming_the_formula_or_the_input():
    with pytest.raises(NonFiniteError, match=r"'naive_exp': ell = log h is \+inf \(h overflows\) at s = 800.0"):
        NAIVE(np.array([0.0, 800.0]))
    with pytest.raises(NonFiniteError, match=r"the score at index \(1,\) is inf: the input is not finite .*not "
                                             r"from g or h"):
        NAIVE(np.array([0.0, np.inf]))
    with pytest.raises(ValueError, match=r"^Q, K: the score 'dot' at index \(0, 0\) is inf although every input "
                                         r"is finite"), np.errstate(over="ignore"):
        attention(np.array([[1e200]]), np.array([[1e200], [1.0]]), np.ones((2, 1)), score="dot",
                  activation=NAIVE)  # the score function overflows: the input's fault, refused before g or h
    with pytest.raises(NonFiniteError, match="grad_phi is nan at index .*the upstream gradient is not finite"):
        NAIVE.backward(np.array([1.0, np.nan]), NAIVE.forward(np.array([0.0, 1.0]))[1])
    w = NAIVE(np.array([[0.0, 1.0], [2.0, 0.5]]), mask=np.array([[True, True], [True, True]]))
    assert np.all(np.isfinite(w))
    # a masked score is ignored, whatever it is
    assert np.all(np.isfinite(NAIVE(np.array([0.0, np.inf]), mask=np.array([True, False]))))


def test_inside_training_a_value_that_is_not_finite_is_a_nan_row():
    twin = divergence_as_data(NAIVE)
    assert twin is not NAIVE and NAIVE.on_non_finite == "raise" and twin.on_non_finite == "nan"
    assert divergence_as_data("softmax") == "softmax"
    w = twin(np.array([[0.0, 800.0], [0.0, 1.0], [np.inf, 0.0]]))
    assert np.all(np.isnan(w[0])) and np.all(np.isnan(w[2]))
    np.testing.assert_allclose(w[1], np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum(), rtol=1e-15)


def test_a_diverging_seed_is_nan_and_the_others_are_as_they_would_be_alone():
    model = NTModel(2, 4, activation=NAIVE)
    params = model.init_params((0, 1))
    params["W_Q"][0] *= 1e3  # seed 0's scores overflow e^s
    params["W_K"][0] *= 1e3
    batch = make_batches("N2T5", 4, (0, 1))(0)[0]
    loss, grads, _ = model.loss_and_grad(params, batch)
    assert not np.isfinite(loss[0]) and np.isfinite(loss[1])
    alone = NTModel(2, 4, activation=NAIVE)
    loss1, grads1, _ = alone.loss_and_grad({k: v[1:] for k, v in params.items()},
                                           {k: v[1:] for k, v in batch.items()})
    assert loss1[0] == loss[1]
    for k in grads:
        np.testing.assert_array_equal(grads1[k][0], grads[k][1])


def test_run_nt_records_diverged_seeds_and_goes_on():
    """A learning rate far too large: every seed's e^s overflows at some epoch; the run ends, each
    seed recorded as diverged, as softmax's are."""
    s = Settings(seeds=2, epochs=30, eval_every=10, n_test=2, lr=50.0)
    with np.errstate(all="ignore"):
        mine = run_nt(Settings(**{**s.__dict__, "activation": NAIVE}))
        builtin = run_nt(Settings(**{**s.__dict__, "activation": "softmax"}))
    assert mine["diverged"] == [True, True] and len(mine["final_accuracy"]) == 2
    assert builtin["diverged"] == [True, True]  # the built-in fares the same: its loss is NaN too


def test_the_classifier_trainer_records_a_diverged_seed(rng):
    tokens = rng.integers(0, 20, (40, 6))
    labels = (tokens[:, 0] < 10).astype(float)
    with np.errstate(all="ignore"):
        model, params, out = train_classifier(tokens, labels, 20, NAIVE, seeds=(0, 1), epochs=3, lr=1e6,
                                              optimizer="sgd", dropout=0.0)
    last = np.asarray(out["history"][-1]["loss"])
    assert last.shape == (2,) and not np.all(np.isfinite(last))
    assert model.act is not NAIVE and model.act.on_non_finite == "nan"
