"""Words about curves (refattn/studies/curves.py): each definition on curves made by hand, and every
committed table in derivations/data/ equal to what the definitions give for its study's file today.

The hand-made curves sit on a grid of evaluations every 100 epochs; noise is a fixed pattern of
+-0.015 (the scatter of one evaluation of 5000 greedy predictions around a flat level), so each
expected answer follows from the thresholds, not from a random draw."""

import json
import pathlib
import re
import shlex

import numpy as np
import pytest

from refattn.cli import main
from refattn.studies import curves
from refattn.studies.curves import (ESCAPE_RISE, PLATEAU_BAND, PLATEAU_CEILING, PLATEAU_DRIFT, PLATEAU_MIN_EPOCHS,
                                    drift, escape, plateaus, smooth, time_to_100, trap)

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "derivations" / "data"
STUDY_FILES = sorted(DATA.glob("15-sensitivity-*.json"))

EPOCHS = np.arange(100, 3100, 100)  # 30 evaluations
NOISE = 0.015 * np.resize([1.0, -1.0, 0.0, 1.0, -1.0, 0.0, -1.0, 1.0], EPOCHS.size)  # within +-0.015, mean ~0


def flat_then_climb(level=0.55, until=1500, rate=0.2):
    """``level`` (with NOISE) up to ``until``, then a climb of ``rate`` per 500 epochs, capped at 1."""
    acc = level + NOISE + np.where(EPOCHS > until, rate * (EPOCHS - until) / 500, 0.0)
    return np.minimum(acc, 1.0)


# --------------------------------------------------------------------------
# The definitions, one by one
# --------------------------------------------------------------------------


def test_smooth_is_a_running_median_of_three_with_means_at_the_ends():
    a = np.array([0.5, 0.9, 0.5, 0.4, 0.6])
    np.testing.assert_allclose(smooth(a), [0.7, 0.5, 0.5, 0.5, 0.5])  # the spike at 0.9 is gone
    assert np.isnan(smooth([0.5, np.nan, 0.5])).all()  # NaN propagates, never vanishes
    with pytest.raises(ValueError, match="accuracy"):
        smooth(np.zeros((2, 3)))


def test_drift_is_the_rise_of_the_least_squares_line():
    e = np.array([0, 100, 200, 300])
    assert drift(e, 0.3 + 0.0001 * e) == pytest.approx(0.03, abs=1e-12)
    assert drift(e, [0.5, 0.52, 0.48, 0.5]) == pytest.approx(-0.012, abs=1e-12)  # slope -2 / 50000 per epoch, times 300
    assert drift([100], [0.5]) == 0.0


def test_a_flat_stretch_then_a_climb_is_one_plateau_and_an_escape():
    acc = flat_then_climb()
    (p,) = plateaus(EPOCHS, acc)
    assert p["start"] == 100 and 1500 <= p["end"] <= 1600  # the climb's first step may still be within the band
    assert p["level"] == pytest.approx(0.55, abs=0.015) and p["high"] - p["low"] <= PLATEAU_BAND + 1e-12
    first = np.flatnonzero(smooth(acc) >= p["level"] + ESCAPE_RISE)[0]
    assert escape(EPOCHS, acc, p) == EPOCHS[first]
    assert p["end"] < escape(EPOCHS, acc, p) <= 1500 + 400  # 0.1 above the level takes 250 epochs of climbing
    assert trap(EPOCHS, acc) is None
    assert time_to_100(EPOCHS, acc) == EPOCHS[np.flatnonzero(acc >= 1.0)[0]]


def test_a_plateau_that_lasts_to_the_end_is_a_trap():
    acc = 0.25 + NOISE
    (p,) = plateaus(EPOCHS, acc)
    assert (p["start"], p["end"]) == (100, 3000)
    assert trap(EPOCHS, acc) == p and escape(EPOCHS, acc, p) is None
    assert time_to_100(EPOCHS, acc) is None


def test_a_steady_climb_inside_the_band_is_not_a_plateau():
    """0.04 per 500 epochs fits a band of 0.05 over 500 epochs, but drifts by 0.04 > PLATEAU_DRIFT."""
    acc = 0.3 + 0.04 * (EPOCHS - 100) / 500
    assert 0.04 > PLATEAU_DRIFT and 0.04 <= PLATEAU_BAND
    assert plateaus(EPOCHS, acc) == []
    # the same climb at half the rate drifts by 0.02 over 500 epochs: flat stretches of a few hundred epochs
    slow = 0.3 + 0.02 * (EPOCHS - 100) / 500
    found = plateaus(EPOCHS, slow)
    assert found and all(abs(drift(EPOCHS[p["first"]:p["last"] + 1], slow[p["first"]:p["last"] + 1]))
                         <= PLATEAU_DRIFT for p in found)


def test_short_high_and_broken_stretches_are_not_plateaus():
    short = np.concatenate([np.linspace(0.1, 0.5, 10), 0.5 + NOISE[:4], np.linspace(0.6, 1.0, 16)])
    assert short.size == EPOCHS.size
    assert all(p["end"] - p["start"] >= PLATEAU_MIN_EPOCHS for p in plateaus(EPOCHS, short))
    assert not [p for p in plateaus(EPOCHS, short) if 1000 <= p["start"] <= 1400]  # 300 epochs at 0.5: too short
    high = np.full(EPOCHS.size, PLATEAU_CEILING + 0.02)  # flat, but a nearly solved task
    assert plateaus(EPOCHS, high) == []
    few = plateaus([0, 1000], [0.5, 0.5])  # long enough, but two evaluations only
    assert few == []
    jumps = np.where(np.arange(EPOCHS.size) % 2, 0.3, 0.5)  # alternating by 0.2: never within the band
    assert plateaus(EPOCHS, jumps) == []


def test_one_outlier_does_not_end_a_plateau_but_two_do():
    acc = 0.4 + NOISE
    one = acc.copy()
    one[12] = 0.25  # a single bad evaluation
    assert [(p["start"], p["end"]) for p in plateaus(EPOCHS, one)] == [(100, 3000)]
    two = acc.copy()
    two[12:14] = 0.25
    assert [(p["start"], p["end"]) for p in plateaus(EPOCHS, two)] != [(100, 3000)]


def test_a_plateau_left_downward_is_neither_an_escape_nor_a_trap():
    acc = np.concatenate([0.5 + NOISE[:15], np.full(15, 0.2)])
    p = plateaus(EPOCHS, acc)[0]
    assert p["end"] < 1600 and escape(EPOCHS, acc, p) is None
    assert trap(EPOCHS, acc)["level"] == pytest.approx(0.2)  # the fall ends on a second, lower plateau


def test_two_plateaus_do_not_overlap_and_each_has_its_escape():
    acc = np.concatenate([0.3 + NOISE[:10], np.linspace(0.35, 0.55, 5), 0.6 + NOISE[:10], np.linspace(0.65, 1, 5)])
    found = plateaus(EPOCHS, acc)
    assert len(found) == 2 and found[0]["last"] < found[1]["first"]
    assert found[0]["level"] == pytest.approx(0.3, abs=0.015) and found[1]["level"] == pytest.approx(0.6, abs=0.015)
    assert escape(EPOCHS, acc, found[0]) < found[1]["start"] + 100 and escape(EPOCHS, acc, found[1]) is not None


def test_bad_curves_are_refused():
    with pytest.raises(ValueError, match="epochs, accuracy"):
        plateaus([1, 2, 3], [0.5, 0.5])
    with pytest.raises(ValueError, match="increasing"):
        plateaus([3, 2, 1], [0.5, 0.5, 0.5])


def test_diverged_seeds_are_left_out_of_the_words_and_the_mean_curve():
    epochs = [100 * k for k in range(1, 11)]
    flat = [0.5 + 0.01 * (k % 2) for k in range(10)]
    dead = [0.06] * 10  # a diverged seed: flat at the frequency of one symbol
    rec = {"eval_epochs": epochs, "accuracy": [flat, dead], "epochs_to_100": [None, None], "diverged": [False, True]}
    words = curves.read_cell(rec, {"figure": "fig3"})
    summary = curves.summarise_cell({k: v for k, v in words.items() if k != "mean_curve"})
    assert summary["diverged"] == 1 and summary["plateau"] == 1 and summary["trapped"] == 1
    assert summary["level"]["max"] == pytest.approx(0.505)  # the dead seed's "plateau" at 0.06 is not counted
    assert words["mean_curve"]["trap"][2] == pytest.approx(0.505)  # the mean over the live seed only


# --------------------------------------------------------------------------
# The committed tables
# --------------------------------------------------------------------------


def _table_of(study_file):
    return DATA / study_file.name.replace("15-sensitivity-", "15-curves-")


def test_every_study_of_curves_has_its_table():
    assert len(STUDY_FILES) >= 16
    for f in STUDY_FILES:
        assert _table_of(f).is_file(), f"no table of {f.name}: run the command in derivation 15, section 11"


@pytest.mark.slow
@pytest.mark.parametrize("study_file", STUDY_FILES, ids=[f.name for f in STUDY_FILES])
def test_each_committed_table_is_what_the_definitions_give_today(study_file):
    table = json.loads(_table_of(study_file).read_text(encoding="utf-8"))
    source = str(study_file.relative_to(ROOT))
    assert table["source"] == source
    assert table["command"] == f"refattn curves {source} --results {_table_of(study_file).relative_to(ROOT)}"
    again = json.loads(json.dumps({"kind": curves.KIND, **curves.curve_table(
        json.loads(study_file.read_text(encoding="utf-8")), source=source, command=table["command"])}))
    assert again == table


def test_time_to_100_is_the_studys_epochs_to_100_on_every_stored_curve():
    """The table takes the time to 100 % from the study; on every curve stored in full it is the
    definition applied to the curve (only curves of more than 40 evaluations are thinned)."""
    checked = 0
    for f in STUDY_FILES:
        data = json.loads(f.read_text(encoding="utf-8"))
        s = data["settings"]
        full = s["epochs"] // s["eval_every"] <= 40
        for rec in data["cells"].values():
            for row, e in zip(rec["accuracy"], rec["epochs_to_100"]):
                if full:
                    assert time_to_100(rec["eval_epochs"], row) == e
                    checked += 1
                elif e is not None:  # thinned: the stored curve reaches 1 no earlier than the full one did
                    hit = time_to_100(rec["eval_epochs"], row)
                    assert hit is None or hit >= e
    assert checked > 1000


def test_the_definitions_on_the_pages_are_the_modules():
    """The results page and derivation 15 state the definitions with the module's thresholds."""
    from refattn.studies.curves import PLATEAU_MIN_EVALUATIONS, SMOOTHING  # noqa: PLC0415

    page = " ".join((ROOT / "docs" / "results.md").read_text(encoding="utf-8").split())
    for phrase in (f"the median of its accuracy over {SMOOTHING} consecutive evaluations",
                   f"A *plateau* is a stretch of at least {PLATEAU_MIN_EPOCHS} epochs and {PLATEAU_MIN_EVALUATIONS} "
                   f"evaluations over which the smoothed accuracy stays within a band of {PLATEAU_BAND:g} and the "
                   f"accuracy's least-squares line rises or falls by at most {PLATEAU_DRIFT:g}, at a level (the median "
                   f"accuracy over the stretch) below {PLATEAU_CEILING:g}",
                   f"A seed *escapes* a plateau when its smoothed accuracy later reaches the plateau's level plus "
                   f"{ESCAPE_RISE:g}",
                   "A *trap* is a plateau that lasts to the run's last evaluation",
                   "*Divergence*: the training loss is not finite at the end of the run",
                   "*Time to 100 %*: the first evaluation at which every greedy prediction of every test series is "
                   "right"):
        assert phrase in page, phrase
    d15 = " ".join((ROOT / "derivations" / "15-nt-experiments.md").read_text(encoding="utf-8").split())
    for phrase in (f"**Plateau**: at least {PLATEAU_MIN_EPOCHS} epochs and {PLATEAU_MIN_EVALUATIONS} evaluations "
                   f"over which the smoothed accuracy stays within a band of {PLATEAU_BAND:g} (highest minus lowest) "
                   f"and the accuracy's least-squares line rises or falls by at most {PLATEAU_DRIFT:g}",
                   f"below {PLATEAU_CEILING:g} (a flat stretch above it is a task nearly solved)",
                   f"**Escape**: after a plateau, the smoothed accuracy reaches its level plus {ESCAPE_RISE:g}"):
        assert phrase in d15, phrase


# --------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------


def test_the_command_writes_a_table_and_replaces_only_its_own(tmp_path, capsys):
    src = str(DATA / "15-sensitivity-fig5-256.json")
    out = tmp_path / "t.json"
    assert main(["curves", src, "--results", str(out)]) == 0
    text = capsys.readouterr().out
    assert "init=0.5 lr=0.02 softmax" in text and "| cell |" in text
    table = json.loads(out.read_text())
    assert table["kind"] == curves.KIND and table["source"] == src
    assert main(["curves", src, "--results", str(out)]) == 0  # a table of this command is replaced
    capsys.readouterr()
    other = tmp_path / "mine.json"
    other.write_text('{"my": "notes"}')
    assert main(["curves", src, "--results", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--results" in err and "left as it is" in err
    assert other.read_text() == '{"my": "notes"}'


#: The settings a source needs (the reproduction: a source without ``n_con`` was an internal error, a
#: curve that was a string a Python message).
SOURCE_SETTINGS = {"figure": "fig3", "task": "N16T2", "n_con": 32, "epochs": 2, "eval_every": 1, "seeds": [0]}


@pytest.mark.parametrize("make, expected", [
    (lambda p: p, "is not a file"),
    (lambda p: (p.write_text("not json"), p)[1], "as JSON"),
    (lambda p: (p.write_text('{"settings": {}}'), p)[1], "not a results file of refattn nt-sensitivity"),
    (lambda p: (p.write_text('{"settings": {"figure": "fig3", "task": "N16T2"}, "cells": {}}'), p)[1],
     "its setting 'n_con' is missing"),
    (lambda p: (p.write_text(json.dumps({"settings": SOURCE_SETTINGS, "cells": {"a": {}}})), p)[1],
     "has no accuracy curves"),
    (lambda p: (p.write_text(json.dumps({"settings": SOURCE_SETTINGS, "cells": {"a": {
        "eval_epochs": [1], "accuracy": "x", "epochs_to_100": []}}})), p)[1], "holds curves of another shape"),
    (lambda p: (p.write_text(json.dumps({"settings": SOURCE_SETTINGS, "cells": {"a": {
        "eval_epochs": [1, 2], "accuracy": [[0.5]], "epochs_to_100": [None]}}})), p)[1],
     "holds curves of another shape"),
])
def test_a_bad_source_is_one_line_naming_it(make, expected, tmp_path, capsys):
    path = make(tmp_path / "s.json")
    assert main(["curves", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "source" in err and expected in err, err


def test_every_table_command_parses_as_recorded():
    for table_file in sorted(DATA.glob("15-curves-*.json")):
        argv = shlex.split(json.loads(table_file.read_text(encoding="utf-8"))["command"])
        assert argv[:2] == ["refattn", "curves"]
        assert re.fullmatch(r"derivations/data/15-sensitivity-[\w.-]+\.json", argv[2])
        assert (ROOT / argv[2]).is_file() and argv[3:] == ["--results", str(table_file.relative_to(ROOT))]
