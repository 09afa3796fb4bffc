"""TanhMax's synthetic polarity experiment (refattn.studies.polarity, `refattn polarity`)."""

import json

import numpy as np
import pytest

from refattn.cli import main
from refattn.studies import polarity
from refattn.training.tasks.polarity import PolarityConfig

pytestmark = pytest.mark.slow

TINY = PolarityConfig(n_pos=10, n_neg=10, n_neutral=80, n_per_class=400, seed=1)


def run_polarity(activations=("softmax", "tanhmax", "signexp", "expressive"), *, progress=False, **settings):
    """:func:`refattn.studies.polarity.run_polarity` with its settings written inline."""
    return polarity.run_polarity(polarity.Settings(activations=activations, **settings), progress=progress)


def test_run_reports_patterns_and_identifiable_contributions():
    r = run_polarity(("softmax", "tanhmax"), seeds=3, config=TINY, epochs=6)
    json.dumps(r)
    for act, res in r["activations"].items():
        assert len(res["per_seed"]) == 3
        assert sum(res["patterns"].values()) == 3
        assert res["opposite_fraction"] == np.mean([row["pattern"] == "opposite" for row in res["per_seed"]])
        for row in res["per_seed"]:
            # the pattern is read off the signs of the two groups' mean weights
            wp, wn = row["weight_positive"], row["weight_negative"]
            expect = "opposite" if wp * wn < 0 else ("both positive" if wp > 0 else "both negative")
            assert row["pattern"] == expect
            if row["converged"]:  # converged runs: positive tokens push the logit up, negative ones down
                assert row["contribution_positive"] > 0 > row["contribution_negative"]
    # softmax weights are positive, so its polar groups can never have opposite signs
    assert r["activations"]["softmax"]["patterns"]["opposite"] == 0
    assert r["activations"]["softmax"]["converged_seeds"] == 3


def test_same_seeds_same_numbers():
    a = run_polarity(("tanhmax",), seeds=2, first_seed=4, config=TINY, epochs=2)
    b = run_polarity(("tanhmax",), seeds=2, first_seed=4, config=TINY, epochs=2)
    for act in a["activations"]:
        assert a["activations"][act]["per_seed"] == b["activations"][act]["per_seed"]


def test_polarity_cli(tmp_path, capsys):
    assert main(["polarity", "--activations", "tanhmax", "--seeds", "2", "--epochs", "1", "--json",
                 "--out", str(tmp_path)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert "opposite_fraction" in res["activations"]["tanhmax"]
    assert (tmp_path / "polarity_fig2.png").stat().st_size > 0


def test_bad_input():
    with pytest.raises(ValueError, match="seeds"):
        run_polarity(seeds=0)
    with pytest.raises(ValueError, match="optimizer"):
        run_polarity(optimizer="rmsprop")


def test_a_diverged_run_is_reported_not_a_crash():
    """SGD with lr 10 sends the loss to NaN: every seed is reported as diverged, with the
    first epoch whose loss is not finite; the means skip it; the text report prints."""
    from refattn.studies.polarity import report

    with np.errstate(all="ignore"):
        result = run_polarity(("softmax",), seeds=2, epochs=2, optimizer="sgd", lr=10.0)
    r = result["activations"]["softmax"]
    assert r["diverged_seeds"] == [0, 1] and r["patterns"]["diverged"] == 2
    assert all(row["diverged_at_epoch"] == 1 and not row["converged"] for row in r["per_seed"])
    assert r["mean"]["weight_positive"] is None
    assert "diverged at epoch 1" in report(result)
