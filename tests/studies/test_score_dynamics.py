"""Proposition 1 against gradient descent (refattn.studies.score_dynamics):
first-order agreement under the assumption, a plateau under shared projections."""

import json

import numpy as np
import pytest

from refattn.cli import main
from refattn.studies import score_dynamics as sd

ETAS = (1e-1, 1e-2, 1e-3)


@pytest.mark.parametrize("act", ["softmax", "tanhmax", "expressive"])
def test_free_parameters_agree_to_first_order_in_the_step(act):
    r = sd.step_check("free", act, etas=ETAS)
    err = np.array(r["vs_prop1"])
    # O(eta): each tenfold smaller step gives a ~tenfold smaller error
    ratios = err[:-1] / err[1:]
    assert np.all((ratios > 7) & (ratios < 13)), err
    assert err[-1] < 1e-4
    np.testing.assert_allclose(r["vs_prop1"], r["vs_exact"], rtol=1e-6)  # the two references coincide
    assert r["sign_agreement"] == 1.0 and r["cross_terms"] < 1e-13  # rounding only


@pytest.mark.parametrize("kind", ["shared", "global"])
def test_shared_projections_plateau_against_prop1_but_not_against_the_exact_velocity(kind):
    r = sd.step_check(kind, "tanhmax", etas=ETAS)
    assert min(r["vs_prop1"]) > 0.1  # does not shrink with the step: a modelling error
    ex = np.array(r["vs_exact"])
    assert np.all(ex[:-1] / ex[1:] > 7) and ex[-1] < 1e-3


def test_trajectories_follow_the_prediction_under_the_assumption_only():
    free = sd.trajectories("free", "softmax", steps=60, eta=0.5)
    shared = sd.trajectories("shared", "softmax", steps=60, eta=0.5)
    assert free["final_rel_gap"] < 1e-2
    assert shared["final_rel_gap"] > 0.1
    assert free["risk"][-1] < free["risk"][0]
    assert free["measured"].shape == free["predicted"].shape == (61, len(free["group"]))
    np.testing.assert_array_equal(free["measured"][0], free["predicted"][0])


def test_dynamics_cli(tmp_path, capsys):
    assert main(["dynamics", "--json", "--steps", "20", "--out", str(tmp_path)]) == 0
    res = json.loads(capsys.readouterr().out)
    kinds = {(r["activation"], r["kind"]) for r in res["rows"]}
    assert kinds == {("softmax", "free"), ("softmax", "shared"), ("tanhmax", "free"), ("tanhmax", "shared")}
    assert (tmp_path / "score_dynamics.png").stat().st_size > 0
    assert main(["dynamics", "--steps", "5"]) == 0
    assert "prop1" in capsys.readouterr().out


def test_bad_settings_are_refused_when_made():
    with pytest.raises(ValueError, match="steps"):
        sd.Settings(steps=0)
    with pytest.raises(ValueError, match="eta"):
        sd.Settings(eta=0.0)


def test_the_tiny_trainer_is_plain_gradient_descent():
    """On R = |theta|^2 / 2 (gradient theta) each step multiplies theta by 1 - eta, exactly in binary
    for eta = 0.5; the trainer yields steps + 1 parameter sets, the first the initial one."""
    theta = {"w": np.array([1.0, -2.0, 4.0])}
    path = list(sd.gradient_descent(lambda p: 0.5 * np.sum(p["w"] ** 2), theta, eta=0.5, steps=3))
    assert len(path) == 4 and path[0] is theta
    for t, p in enumerate(path):
        np.testing.assert_array_equal(p["w"], theta["w"] * 0.5**t)
