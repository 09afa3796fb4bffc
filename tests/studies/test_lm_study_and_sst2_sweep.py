"""The LM study and the SST sweep, at toy size: files, resume, selection, paired gaps."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import pytest

from refattn.studies import lm_study, sst2_sweep
from tests.support import SELF_EDITING

pytestmark = pytest.mark.slow


def run_lm_study(*, progress=False, command=None, **settings):
    """:func:`refattn.studies.lm_study.run_lm_study` with its settings written inline."""
    return lm_study.run_lm_study(lm_study.Settings(**settings), progress=progress, command=command)


def test_gap_curve_by_hand():
    rec = {"curve": {"step": [1, 2, 3, 4, 5], "dev_loss": [[5, 4, 3, 2.0, 2.0], [5, 4, 3, 2.2, 2.4]]}}
    ref = {"curve": {"step": [1, 2, 3, 4, 5], "dev_loss": [[5, 4, 3, 2.5, 2.5], [5, 4, 3, 2.5, 2.5]]}}
    g = lm_study.gap_curve(rec, ref)
    np.testing.assert_allclose(g["mean"], [0, 0, 0, -0.4, -0.3])
    np.testing.assert_allclose(g["se"][-1], np.std([-0.5, -0.1], ddof=1) / np.sqrt(2))
    # index round(0.75 * 4) = 3: change = mean[4] - mean[3] = -0.3 + 0.4
    assert g["change"] == pytest.approx(0.1)
    assert g["settled"] == (abs(0.1) <= 2 * np.hypot(g["se"][-1], g["se"][3]))


def test_best_lrs_picks_the_lowest_finite_loss():
    cells = {"tune softmax lr=0.001": {"finite": True, "dev_loss_mean": 2.0},
             "tune softmax lr=0.003": {"finite": True, "dev_loss_mean": 1.5},
             "tune softmax lr=0.01": {"finite": False, "dev_loss_mean": float("nan")}}
    assert lm_study.best_lrs(cells, ["softmax", "tanhmax"], [1e-3, 3e-3, 1e-2]) == {"softmax": 3e-3}


def test_lm_study_toy_runs_resumes_and_refuses_other_settings(tmp_path, monkeypatch):
    path = tmp_path / "lm.json"
    kw = dict(activations=("softmax", "tanhmax"), lrs=(3e-3, 1e-2), seeds=2, steps=4, long_steps=6, long_evals=3,
              data="toy", results=str(path), progress=False)
    monkeypatch.setattr(lm_study, "VARIANTS", ("softmax", "tanhmax"))  # a short table
    r = run_lm_study(**kw)
    saved = json.loads(path.read_text())
    assert set(saved["cells"]) >= {"table softmax lr=0.003", "tune tanhmax lr=0.01"}
    assert saved["cells"]["tune softmax lr=0.003"] == saved["cells"]["table softmax lr=0.003"]  # one run, reused
    best = r["best_lr"]["tanhmax"]
    long = saved["cells"][f"long tanhmax lr={best:g} steps=6"]
    assert long["curve"]["step"] == [2, 4, 6]
    gap = r["gaps"]["tanhmax"]["dev_loss"]
    ref = saved["cells"][f"long softmax lr={r['best_lr']['softmax']:g} steps=6"]
    want = np.asarray(long["curve"]["dev_loss"]) - np.asarray(ref["curve"]["dev_loss"])
    np.testing.assert_allclose(gap["mean"], want.mean(axis=0), rtol=1e-12)
    assert "| tanhmax |" in lm_study.report(r)
    calls = []
    real_run_lm = lm_study.run_lm
    monkeypatch.setattr(lm_study, "run_lm", lambda *a, **k: calls.append(a) or None)
    again = run_lm_study(**kw)
    assert calls == [] and again["cells"] == saved["cells"]
    with pytest.raises(ValueError, match="other settings.*steps"):
        run_lm_study(**{**kw, "steps": 5})
    # a longer long run shares the file: only the long runs are new
    calls.clear()
    monkeypatch.setattr(lm_study, "run_lm", real_run_lm)
    longer = run_lm_study(**{**kw, "long_steps": 8, "long_evals": 2})
    runs = lm_study._long_runs(longer["best_lr"])  # the best rates, and the control where tanhmax's differs
    assert {k for k in longer["cells"] if k.endswith("steps=8")} == {f"long {v} lr={lr:g} steps=8" for _, v, lr in runs}
    assert set(longer["gaps"]) == {name for name, v, _ in runs if v != "softmax"}
    with pytest.raises(ValueError, match="softmax"):
        run_lm_study(**{**kw, "activations": ("tanhmax",)})
    with pytest.raises(ValueError, match="phases"):
        run_lm_study(**{**kw, "phases": ("warmup",)})


def test_long_runs_add_a_control_at_softmaxs_rate_only_where_the_best_rate_differs():
    best = {"softmax": 3e-3, "tanhmax": 1e-2, "cog-hybrid": 1e-2, "neural-first": 3e-3}
    assert lm_study._long_runs(best) == [
        ("softmax", "softmax", 3e-3), ("tanhmax", "tanhmax", 1e-2), ("cog-hybrid", "cog-hybrid", 1e-2),
        ("neural-first", "neural-first", 3e-3), ("tanhmax lr=0.003", "tanhmax", 3e-3),
        ("cog-hybrid lr=0.003", "cog-hybrid", 3e-3)]
    assert lm_study._long_runs({"tanhmax": 1e-2}) == [("tanhmax", "tanhmax", 1e-2)]  # no softmax, no control


def test_control_phase_runs_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(lm_study, "VARIANTS", ("softmax", "tanhmax"))
    # tuning made tanhmax's best rate differ from softmax's: fake the tuning cells' losses
    real = lm_study.run_lm
    calls = []
    monkeypatch.setattr(lm_study, "run_lm",
                        lambda s, **k: calls.append((s.activations[0], s.lr, s.steps)) or real(s, **k))
    kw = dict(activations=("softmax", "tanhmax"), lrs=(3e-3, 1e-2), seeds=2, steps=4, long_steps=6, long_evals=3,
              data="toy", results=str(tmp_path / "lm.json"), progress=False)
    run_lm_study(**kw, phases=("table", "tune"))
    doc = json.loads((tmp_path / "lm.json").read_text())
    for key, loss in (("tune tanhmax lr=0.01", 0.5), ("tune softmax lr=0.01", 99.0)):  # tanhmax's best is now
        rec = doc["cells"][key]                                                        # 1e-2, softmax's 3e-3
        for seed in rec["per_seed"]:  # the seeds' numbers, and so their mean (a file is read as consistent)
            seed["dev_loss"] = loss
        rec["dev_loss_mean"], rec["dev_loss_std"] = loss, 0.0
    (tmp_path / "lm.json").write_text(json.dumps(doc))
    calls.clear()
    r = run_lm_study(**kw, phases=("long",))
    assert sorted(calls) == [("softmax", 3e-3, 6), ("tanhmax", 1e-2, 6)] and "tanhmax lr=0.003" not in r["gaps"]
    calls.clear()
    r = run_lm_study(**kw, phases=("control",))
    assert calls == [("tanhmax", 3e-3, 6)] and set(r["gaps"]) == {"tanhmax", "tanhmax lr=0.003"}
    assert "| tanhmax | 0.003 |" in lm_study.report(r)


@pytest.fixture
def tiny_folder(tmp_path):
    """Phrases that nest (so the maximal ones are fewer), with separable labels."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(60):
        y = int(rng.integers(2))
        words = [("good" if y else "bad") + str(rng.integers(3)), f"w{i}", "film", f"v{i}"]
        sentence = " ".join(words)
        rows += [(y, sentence), (y, " ".join(words[:2])), (y, words[0])]
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for y, s in rows))
    dev = [(y, ("good" if y else "bad") + "1 x film") for y in (0, 1) * 10]
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for y, s in dev))
    return tmp_path


def test_sentences_of_keeps_the_maximal_phrases_with_their_labels():
    phrases = ["a good film", "good film", "good", "a bad one", "bad"]
    labels = np.array([1, 1, 1, 0, 0])
    text, y = sst2_sweep.sentences_of(phrases, labels)
    assert text == ["a good film", "a bad one"] and y.tolist() == [1, 0]


def test_sst2_sweep_tiny(tiny_folder, tmp_path):
    path = tmp_path / "sst.json"
    kw = dict(data=str(tiny_folder), seeds=2, embed_dims=(8,), trainings=("adam/sentences",),
              epochs={"adam/sentences": 3}, results=str(path))
    r = sst2_sweep.run_sst2_sweep(sst2_sweep.Settings(**kw), progress=False)
    saved = json.loads(path.read_text())
    cell = saved["cells"]["embed=8 adam sentences softmax"]
    assert cell["n_train"] == 60 and np.shape(cell["dev_accuracy"]) == (2, 3)
    best = r["best"]["softmax"]
    acc = np.asarray(cell["dev_accuracy"])
    assert best["mean"] == pytest.approx(acc.mean(axis=0).max()) and best["epoch"] == acc.mean(axis=0).argmax() + 1
    assert "p_tanhmax_vs_softmax" in r["best"]["by_setting"]["embed=8 adam sentences"]
    assert "best tanhmax" in sst2_sweep.report(r)
    with pytest.raises(ValueError, match="trainings: expected one of"):  # refused when the settings are made
        sst2_sweep.Settings(**{**kw, "trainings": ("rmsprop/phrases",)})


def test_lm_study_cli_records_its_command_and_resumes(tmp_path, monkeypatch, capsys):
    from refattn.cli import main  # noqa: PLC0415

    monkeypatch.setattr(lm_study, "VARIANTS", ("softmax", "tanhmax"))  # a short table
    real = lm_study.run_lm_study
    seen = []

    def small(settings, *, command=None, progress=None):  # the command line's own settings, on a small grid
        seen.append(settings)
        return real(dataclasses.replace(settings, activations=("softmax", "tanhmax"), lrs=(3e-3, 1e-2), seeds=2,
                                        steps=4), command=command, progress=progress)

    monkeypatch.setattr(lm_study, "run", small)
    path = tmp_path / "lm.json"
    argv = ["lm-study", "--data", "toy", "--long-steps", "6", "--long-evals", "3", "--results", str(path)]
    assert main(argv) == 0
    assert "| tanhmax |" in capsys.readouterr().out
    assert seen[0].long_steps == 6 and seen[0].long_evals == 3 and seen[0].phases == lm_study.PHASES
    saved = json.loads(path.read_text())
    assert saved["runs"][0]["command"] == "refattn " + " ".join(argv)
    assert any(k.endswith("steps=6") for k in saved["cells"])
    assert main(argv + ["--json"]) == 0  # resumed: nothing new, the same cells
    assert json.loads(capsys.readouterr().out)["cells"] == saved["cells"]
    assert main(["lm-study", "--phases", "table,,long"]) == 2
    assert "--phases" in capsys.readouterr().err


# --------------------------------------------------------------------------
# What a cell reads is read once, fingerprinted, and sent with the cell
# --------------------------------------------------------------------------

STEADY = '''
import autograd.numpy as anp

def g(s):
    return anp.exp(s)

a = {"g": g, "h": g}
'''


LM_ARGS = ["lm-study", "--data", "toy", "--lrs", "0.01,0.003", "--seeds", "1", "--steps", "3", "--long-steps", "3",
           "--long-evals", "1", "--phases", "tune,long", "--json"]


def test_a_formula_edited_mid_run_changes_no_cell(tmp_path, monkeypatch, capsys):
    """The formula is read once, its SHA-256 recorded, and the cells run that formula, whatever happens to the
    file while the grid runs: every cell equals the same grid run from a file that never changed."""
    from refattn.cli import main  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text(SELF_EDITING)
    (tmp_path / "steady.py").write_text(STEADY)
    original = hashlib.sha256(SELF_EDITING.encode()).hexdigest()
    assert main(LM_ARGS + ["--activations", "softmax,mine.py:a", "--results", "edited.json"]) == 0
    assert (tmp_path / "mine.py").read_text() != SELF_EDITING  # it did change during the run
    assert main(LM_ARGS + ["--activations", "softmax,steady.py:a", "--results", "steady.json"]) == 0
    capsys.readouterr()
    edited, steady = (json.loads((tmp_path / f).read_text()) for f in ("edited.json", "steady.json"))
    assert edited["settings"]["activation_files"]["a"]["sha256"] == original
    strip = lambda rec: {k: v for k, v in rec.items() if k != "train_seconds"}  # noqa: E731
    assert set(edited["cells"]) == set(steady["cells"])
    for key in edited["cells"]:
        assert strip(edited["cells"][key]) == strip(steady["cells"][key]), key
    # the file as it is now is another formula: resuming with it is refused, naming it
    assert main(LM_ARGS + ["--activations", "softmax,mine.py:a", "--results", "edited.json"]) == 2
    assert "activation_files" in capsys.readouterr().err


@pytest.mark.parametrize("edit, said", [
    (lambda d, k: d["cells"][k].update(dev_loss_mean=0.01), "dev_loss_mean 0.01 is not its seeds'"),
    (lambda d, k: d["cells"][k].update(finite=False), "its finite False contradicts"),
    (lambda d, k: d["cells"].update({"tune softmax lr=0.5": d["cells"][k]}), "not a run of its grid"),
    (lambda d, k: d["ran_on"].update({k: None}), "is not a record of where it ran"),
    (lambda d, k: d["ran_on"].pop(k), "has no place in 'ran_on'"),
])
def test_lm_study_refuses_a_file_whose_numbers_are_not_its_seeds(edit, said, tmp_path, monkeypatch, capsys):
    from refattn.cli import main  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    args = LM_ARGS + ["--activations", "softmax", "--lrs", "0.01", "--results", "r.json"]
    assert main(args) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    edit(doc, "tune softmax lr=0.01")
    (tmp_path / "r.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "r.json" in err and said in err, err
