"""Runs that survive their users, the third round, family by family: nothing a user wrote is
overwritten unasked (outputs that coincide, reruns, foreign and read-only files), edited or damaged
inputs are refused (checkpoints, results files), everything that can fail does so before the work
(reports, the output's encoding, read-only files, every checkpoint's run), every signal is answered
in one line, values that look alike keep distinct names, and messages name what went wrong. Each
test begins with the reproduction it turns into a test."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from tests.support import wait_for

from refattn import cli
from refattn.studies import study
from refattn.training import runs
from refattn.training.train import load_checkpoint

from tests.support import default_sigint
from tests.support import TINY

pytestmark = pytest.mark.slow

PY = sys.executable
NT = ["nt", "--task", "N2T1", "--context", "4", "--seeds", "1", "--eval-every", "2", "--n-test", "2"]
SENSITIVITY = ["nt-sensitivity"] + TINY["nt-sensitivity"]
LM_STUDY = ["lm-study"] + TINY["lm-study"]
POLARITY = ["polarity", "--activations", "softmax,tanhmax", "--seeds", "1", "--epochs", "1"]


def _one_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _files(folder):
    """Every file under ``folder`` with its bytes and permission bits, but the lock files (empty: the
    lock is the system's, on the file, and the file stays where filelock made it)."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mode) for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.endswith(".lock")}


# --------------------------------------------------------------------------
# Nothing a user wrote is overwritten unasked
# --------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [SENSITIVITY, LM_STUDY], ids=["nt-sensitivity", "lm-study"])
@pytest.mark.parametrize("spelling", ["same", "dot", "link", "hard link"])
def test_an_out_folder_holding_the_results_file_is_refused_before_it_is_touched(argv, spelling, tmp_path, capsys):
    """The reproduction: ``nt-sensitivity ... --results d/nt-sensitivity.json --out d`` wrote the
    --out results file first, over the finished cells, then refused the run."""
    command, d = argv[0], tmp_path / "d"
    d.mkdir()
    results = d / f"{command}.json"
    assert cli.main(argv + ["--results", str(results), "--json"]) == 0
    capsys.readouterr()
    out = {"same": str(d), "dot": str(d) + "/./", "link": str(tmp_path / "alias"),
           "hard link": str(tmp_path / "e")}[spelling]
    if spelling == "link":
        os.symlink(d, tmp_path / "alias")
    if spelling == "hard link":
        (tmp_path / "e").mkdir()
        os.link(results, tmp_path / "e" / f"{command}.json")
    before = _files(tmp_path)
    assert cli.main(argv + ["--results", str(results), "--out", out]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"refattn {command}: error: --out: names the same file as --results" in err, err
    assert _files(tmp_path) == before  # not a byte changed, no temporary left


def test_a_rerun_keeps_the_earlier_results_until_its_first_piece_is_finished(tmp_path, monkeypatch, capsys):
    """The reproduction: rerunning a finished ``polarity --out o`` and interrupting it turned the
    complete results file into a partial (empty) one."""
    import refattn.studies.polarity as pol

    out = tmp_path / "o"
    assert cli.main(POLARITY + ["--out", str(out)]) == 0
    complete = (out / "polarity.json").read_bytes()
    assert json.loads(complete)["complete"] is True
    real = pol.train_classifier

    def interrupted_at(activation):
        def train(tokens, labels, vocab, act, **kw):
            if act == activation:
                raise KeyboardInterrupt
            return real(tokens, labels, vocab, act, **kw)
        return train

    monkeypatch.setattr(pol, "train_classifier", interrupted_at("softmax"))  # before the first piece
    capsys.readouterr()
    assert cli.main(POLARITY + ["--out", str(out)]) == 130
    assert f"kept {out}/polarity.json (complete)" in _one_line(capsys.readouterr().err)
    assert (out / "polarity.json").read_bytes() == complete
    monkeypatch.setattr(pol, "train_classifier", interrupted_at("tanhmax"))  # after it: replaced atomically
    assert cli.main(POLARITY + ["--out", str(out)]) == 130
    doc = json.loads((out / "polarity.json").read_text())
    assert doc["complete"] is False and list(doc["finished"]) == ["softmax"]
    assert sorted(os.listdir(out)) == [".refattn.lock", "polarity.json", "polarity_fig2.png"]


def test_a_file_in_the_out_folder_that_is_not_a_results_file_is_never_replaced(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    for text in ('{"mine": 1}\n', "notes\n", "[]"):
        (out / "polarity.json").write_text(text)
        assert cli.main(POLARITY + ["--out", str(out)]) == 2
        err = _one_line(capsys.readouterr().err)
        assert "--out: " in err and "exists and is not a results file of refattn; it is left as it is" in err
        assert (out / "polarity.json").read_text() == text


def test_read_only_outputs_are_refused_before_any_work_and_never_replaced(tmp_path, capsys, monkeypatch):
    """The reproductions: a read-only .npz or results file was replaced by a rename (made writable)."""
    ck = tmp_path / "ck.npz"
    assert cli.main(NT + ["--epochs", "2", "--checkpoint", str(ck)]) == 0
    capsys.readouterr()
    monkeypatch.setattr(study("nt"), "run", lambda *a, **kw: pytest.fail("work started"))
    ck.chmod(0o444)
    before = _files(tmp_path)
    assert cli.main(NT + ["--epochs", "4", "--checkpoint", str(ck)]) == 2
    assert _one_line(capsys.readouterr().err) == (f"refattn nt: error: --checkpoint: {str(ck)!r} is read-only; "
                                                  f"it is left as it is (make it writable, or give another path)")
    assert _files(tmp_path) == before
    ck.chmod(0o644)
    results = tmp_path / "cells.json"
    assert cli.main(SENSITIVITY + ["--results", str(results), "--json"]) == 0
    out = tmp_path / "out"
    assert cli.main(["prop1", "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    results.chmod(0o444)
    (out / "prop1.png").chmod(0o444)
    before = _files(tmp_path)
    for argv in (SENSITIVITY + ["--results", str(results)], ["prop1", "--out", str(out)]):
        assert cli.main(argv) == 2
        assert "is read-only; it is left as it is" in _one_line(capsys.readouterr().err)
    assert _files(tmp_path) == before


def test_atomic_write_refuses_a_read_only_file_and_keeps_the_permissions_of_one_it_replaces(tmp_path):
    path = tmp_path / "f.json"
    path.write_text("old")
    path.chmod(0o640)
    runs.atomic_write(path, lambda fh: fh.write(b"new"))
    assert path.read_text() == "new" and path.stat().st_mode & 0o777 == 0o640
    path.chmod(0o440)
    with pytest.raises(PermissionError, match="read-only") as refused:
        runs.atomic_write(path, lambda fh: fh.write(b"newer"))
    assert refused.value.filename == str(path)
    assert path.read_text() == "new" and path.stat().st_mode & 0o777 == 0o440
    assert os.listdir(tmp_path) == ["f.json"]


# --------------------------------------------------------------------------
# Edited or damaged inputs are refused
# --------------------------------------------------------------------------


def _checkpoint_edits():
    def npz(change):
        def edit(ck):
            arrays = dict(np.load(ck))
            meta = json.loads(str(arrays["meta"]))
            change(arrays, meta)
            arrays["meta"] = np.array(json.dumps(meta))
            np.savez(ck, **arrays)
        return edit

    def history(change):
        return npz(lambda a, m: m.update(history=change(m["history"])))

    def params_as(dtype):
        return lambda a, m: a.update({k: v.astype(dtype) for k, v in a.items() if k.startswith("param/")})

    def loss_edited(h):
        h[0]["loss"][0] += 1
        return h

    return {
        "a history record deleted": history(lambda h: h[:1] + h[2:]),
        "a history record duplicated": history(lambda h: h[:2] + h[1:]),
        "two history records swapped": history(lambda h: [h[1], h[0]] + h[2:]),
        "a record renumbered": history(lambda h: [{**h[0], "epoch": 5}] + h[1:]),
        "a loss edited": history(loss_edited),
        "the epoch edited": npz(lambda a, m: m.update(epoch=1)),
        "the learning rate edited": npz(lambda a, m: m["optimizer"].update(lr=0.5)),
        "the digest removed": npz(lambda a, m: (m["optimizer"].update(lr=0.5), a.pop("digest"))),
        "a parameter's dtype edited": npz(params_as(np.float32)),
        "a parameter edited": npz(lambda a, m: a.update({k: v + 1e-12 for k, v in a.items() if k == "param/W_Q"})),
    }


@pytest.mark.parametrize("edit", list(_checkpoint_edits()))
def test_an_edited_checkpoint_is_refused_before_any_work_naming_the_file_and_the_option(edit, tmp_path, capsys):
    """The reproductions: a history record deleted, duplicated, swapped or renumbered resumed with a
    corrupted record; the .npz's epoch, learning rate or a parameter's dtype edited resumed at the
    edited values. The checkpoint's one digest refuses every edit."""
    ck = tmp_path / "ck.npz"
    assert cli.main(NT + ["--epochs", "4", "--checkpoint", str(ck)]) == 0
    capsys.readouterr()
    assert "param/W_Q" in np.load(ck).files or not edit.startswith("a parameter edited")
    _checkpoint_edits()[edit](ck)
    before = _files(tmp_path)
    assert cli.main(NT + ["--epochs", "6", "--checkpoint", str(ck)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert err.startswith(f"refattn nt: error: --checkpoint: {str(ck)!r}: "), err
    assert "edited or damaged after it was saved, and it is left as it is" in err, err
    assert _files(tmp_path) == before


def test_a_learning_rate_drop_resumes_bit_for_bit_across_the_drop(tmp_path):
    """The drop lives in the trainer's schedule: the checkpoint holds the rate after the drop."""
    from refattn.studies.nt_training import Settings, run_nt

    base = dict(task="N2T1", context=4, seeds=2, eval_every=2, n_test=2, lr_drop=(3, 4))
    straight = run_nt(Settings(epochs=6, **base), progress=False)
    ck = str(tmp_path / "ck.npz")
    run_nt(Settings(epochs=4, checkpoint=ck, **base), progress=False)
    assert load_checkpoint(ck)["optimizer"]["lr"] == Settings().lr / 4
    resumed = run_nt(Settings(epochs=6, checkpoint=ck, **base), progress=False)
    assert resumed["accuracy"] == straight["accuracy"] and resumed["loss"] == straight["loss"]


@pytest.mark.parametrize("command", ["nt-sensitivity", "lm-study", "sst2-sweep"])
def test_a_results_file_of_another_shape_is_refused_in_one_line_naming_it(command, sst2_folder, tmp_path, capsys):
    """The reproduction: a results file whose cells are a list, a string or miss a key gave a Python
    message or an internal error instead of "not a results file of ..."; one whose values were of
    another kind would have failed after the first new cell."""
    argv = [command] + [str(sst2_folder) if a == "SST2" else a for a in TINY[command]]
    results = tmp_path / "r.json"
    assert cli.main(argv + ["--results", str(results), "--json"]) == 0
    good = json.loads(results.read_text())
    capsys.readouterr()
    name = next(iter(good["cells"]))
    broken = {"a list": [], "a string": "cells", "cells a list": {**good, "cells": []},
              "a cell a string": {**good, "cells": {name: "x"}},
              "a cell missing a key": {**good, "cells": {name: {k: v for k, v in list(good["cells"][name].items())[1:]}}},
              "no settings": {"cells": good["cells"]}, "runs a string": {**good, "runs": "x"}}
    read = {"nt-sensitivity": "epochs_to_100", "lm-study": "dev_loss_mean", "sst2-sweep": "dev_accuracy"}[command]
    broken["a value the study reads of another kind"] = {**good, "cells": {name: {**good["cells"][name], read: "x"}}}
    if command == "nt-sensitivity":  # a per-seed list cut short: a cell of fewer seeds than the file's
        broken["a seed's number cut"] = {**good, "cells": {name: {**good["cells"][name],
                                                                 "final_accuracy": good["cells"][name]["final_accuracy"][:1]}}}
    for what, doc in broken.items():
        results.write_text(json.dumps(doc))
        assert cli.main(argv + ["--results", str(results)]) == 2, what
        err = _one_line(capsys.readouterr().err)
        assert err.startswith(f"refattn {command}: error: --results: {results} is not a results file of "), (what, err)
        assert json.loads(results.read_text()) == doc


# --------------------------------------------------------------------------
# Everything that can fail, before the work
# --------------------------------------------------------------------------


def test_lm_study_with_one_seed_reports_n_a_where_a_spread_needs_two(capsys):
    """The reproduction: lm-study with one seed failed after all its runs (a standard deviation of
    None in the report)."""
    argv = ["lm-study", "--data", "toy", "--activations", "softmax,tanhmax", "--lrs", "0.01", "--seeds", "1",
            "--steps", "2", "--long-steps", "2", "--long-evals", "1", "--phases", "table,tune,long"]
    assert cli.main(argv + ["--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["cells"]["table softmax lr=0.003"]["dev_loss_std"] is None
    assert result["gaps"]["tanhmax"]["dev_loss"]["settled"] is None  # one seed: no verdict, not "false"
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "± n/a" in text and "nan" not in text and "| n/a |" in text
    assert "need at least two seeds" in text


def test_a_report_that_fails_after_the_work_prints_the_results_as_json(monkeypatch, capsys):
    assert cli.main(["prop1", "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    monkeypatch.setattr(study("prop1"), "report", lambda result: 1 / 0)
    assert cli.main(["prop1"]) == 0
    captured = capsys.readouterr()
    assert _without_seconds(json.loads(captured.out)) == _without_seconds(expected)
    assert _one_line(captured.err).startswith("refattn prop1: warning: the text report failed (ZeroDivisionError")


def _without_seconds(obj):
    if isinstance(obj, dict):
        return {k: _without_seconds(v) for k, v in obj.items() if "seconds" not in k}
    return [_without_seconds(v) for v in obj] if isinstance(obj, list) else obj


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_an_output_that_cannot_encode_the_report_gets_it_in_ascii(encoding, tmp_path):
    """The reproduction: a standard output that could not encode "±" lost the report after the work."""
    argv = ["lm", "--data", "toy", "--activations", "softmax,tanhmax", "--seeds", "2", "--steps", "2", "--layers", "1",
            "--width", "8"]
    p = subprocess.run([PY, "-m", "refattn", *argv], capture_output=True, env={**os.environ, "PYTHONIOENCODING": encoding},
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    text = p.stdout.decode(encoding)  # what the terminal shows
    assert "Dacc pp" in text and "variant minus softmax" in text
    assert ("+/-" in text) == (encoding == "ascii") and ("±" in text) == (encoding == "latin-1")


def test_every_checkpoint_of_a_study_is_compared_with_its_run_before_the_first_trains(tmp_path, capsys):
    """The reproduction: polarity --checkpoint-dir trained the first activation before refusing the
    second's checkpoint (another learning rate)."""
    ckdir = tmp_path / "cks"
    assert cli.main(["polarity", "--activations", "tanhmax", "--seeds", "1", "--epochs", "1", "--lr", "0.02",
                     "--checkpoint-dir", str(ckdir)]) == 0
    capsys.readouterr()
    before = _files(tmp_path)
    assert cli.main(POLARITY + ["--checkpoint-dir", str(ckdir)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"--checkpoint-dir: '{ckdir}/polarity_tanhmax.npz' belongs to another run (lr 0.02 in the checkpoint, " \
           f"0.01 in this run)" in err, err
    assert _files(tmp_path) == before  # softmax was not trained
    lm = ["lm", "--data", "toy", "--seeds", "1", "--steps", "2", "--layers", "1", "--width", "8"]
    assert cli.main(lm + ["--activations", "tanhmax", "--lr", "0.01", "--checkpoint-dir", str(ckdir)]) == 0
    capsys.readouterr()
    before = _files(tmp_path)
    assert cli.main(lm + ["--activations", "softmax,tanhmax", "--checkpoint-dir", str(ckdir)]) == 2
    assert "lm_tanhmax.npz' belongs to another run (lr 0.01 in the checkpoint" in _one_line(capsys.readouterr().err)
    assert _files(tmp_path) == before


# --------------------------------------------------------------------------
# Every signal a user sends is answered
# --------------------------------------------------------------------------


def _start_long_nt(tmp_path, **popen):
    argv = NT + ["--epochs", "1000000", "--eval-every", "500000", "--checkpoint", "ck.npz", "--out", "out"]
    child = subprocess.Popen([PY, "-m", "refattn", *argv], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, **popen)
    wait_for((tmp_path / "ck.npz").exists, "the run's first checkpoint", proc=child)
    return child, argv


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_sigterm_and_sighup_are_answered_as_ctrl_c(sig, tmp_path):
    """The reproduction: SIGTERM and SIGHUP ended a run with exit 143 and no line."""
    child, argv = _start_long_nt(tmp_path, preexec_fn=default_sigint)
    try:
        child.send_signal(sig)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 128 + sig
    how = "interrupted" if sig == signal.SIGINT else f"stopped by {sig.name}"
    line = _one_line(err)
    assert line.startswith(f"refattn nt: {how}; kept ck.npz (") and "epochs trained" in line, line
    assert line.endswith("to resume, run the same command again: refattn " + " ".join(argv))
    assert sorted(os.listdir(tmp_path)) == ["ck.npz", "ck.npz.lock", "out"]  # no temporary
    assert load_checkpoint(tmp_path / "ck.npz")["epoch"] >= 0


def test_a_signal_ignored_when_refattn_started_stays_ignored(tmp_path):
    """``nohup`` ignores SIGHUP: refattn does not undo that."""
    def nohup():
        default_sigint()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    child, _ = _start_long_nt(tmp_path, preexec_fn=nohup)
    try:
        child.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert child.poll() is None
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 143 and "stopped by SIGTERM" in _one_line(err)


# --------------------------------------------------------------------------
# Values that look alike keep distinct names; the report says what the JSON says
# --------------------------------------------------------------------------


def test_learning_rates_that_look_alike_are_two_cells_with_two_names(tmp_path, capsys):
    """The reproduction: ``--lrs 0.02,0.020000001`` ran one cell for two rates and printed it twice."""
    argv = ["nt-sensitivity", "fig4", "--seeds", "2", "--epochs", "2", "--eval-every", "2", "--init-scales", "1",
            "--lrs", "0.02,0.020000001", "--n-test", "2"]
    assert cli.main(argv + ["--json"]) == 0
    cells = json.loads(capsys.readouterr().out)["cells"]
    assert sorted(cells) == ["init=1 lr=0.02 expressive", "init=1 lr=0.02 softmax",
                             "init=1 lr=0.020000001 expressive", "init=1 lr=0.020000001 softmax"]
    assert cli.main(argv) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| x1 |")]
    assert [r.split(" | ")[1] for r in rows] == ["0.02", "0.020000001"]
    argv = ["lm-study", "--data", "toy", "--activations", "softmax", "--lrs", "0.01,0.010000001", "--seeds", "1",
            "--steps", "2", "--phases", "tune"]
    assert cli.main(argv + ["--json"]) == 0
    assert sorted(json.loads(capsys.readouterr().out)["cells"]) == ["tune softmax lr=0.01",
                                                                    "tune softmax lr=0.010000001"]


def test_number_names_are_short_and_distinct():
    from refattn.studies.helpers import number_name

    assert [number_name(x) for x in (0.02, 1.0, 2, 0.32, 1e-3, 0.020000001, 1 / 3)] == \
        ["0.02", "1", "2", "0.32", "0.001", "0.020000001", repr(1 / 3)]
    values = np.random.default_rng(0).uniform(0, 1, 2000)
    assert len({number_name(v) for v in values}) == len(set(values.tolist()))
    assert all(float(number_name(v)) == v for v in values)


# --------------------------------------------------------------------------
# Messages that name what went wrong
# --------------------------------------------------------------------------


def test_a_folder_or_a_pipe_as_the_activation_file_is_named_for_what_it_is(tmp_path, capsys):
    """The reproduction: a directory or FIFO given as FILE was called "no such file"."""
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "folder.py").mkdir()
    for path, what in ((tmp_path / "folder.py", "is a folder"), (tmp_path / "pipe.py", "is not a regular file"),
                       (tmp_path / "absent.py", "no such file")):
        assert cli.main(["check", "--activation", f"{path}:x"]) == 2
        err = _one_line(capsys.readouterr().err)
        assert err.startswith("refattn check: error: --activation: ") and what in err and str(path) in err, err


def test_a_removed_working_folder_is_named_with_the_option_that_needs_it(tmp_path):
    """The reproduction: ``refattn nt --checkpoint ck.npz`` in a removed folder said only "No such
    file or directory"."""
    gone = tmp_path / "gone"
    gone.mkdir()
    code = (f"import os, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); from refattn.cli import main; "
            f"sys.exit(main(sys.argv[1:]))")
    p = subprocess.run([PY, "-c", code, *NT, "--epochs", "1", "--checkpoint", "ck.npz"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2
    assert _one_line(p.stderr) == ("refattn nt: error: --checkpoint: 'ck.npz' is relative to the working folder, "
                                   "which no longer exists (it was removed); give an absolute path, or change to a "
                                   "folder that exists")
    gone.mkdir()
    p = subprocess.run([PY, "-c", code, "prop1", "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0  # a command that names no file does not need one


def test_a_checkpoint_whose_optimiser_does_not_fit_names_the_file_and_the_option(tmp_path, capsys):
    ck = tmp_path / "ck.npz"
    assert cli.main(NT + ["--epochs", "2", "--checkpoint", str(ck)]) == 0
    assert cli.main(NT + ["--epochs", "3", "--checkpoint", str(ck), "--lr", "0.5"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert err.startswith(f"refattn nt: error: --checkpoint: {str(ck)!r} belongs to another run (lr ")
    assert cli.main(NT + ["--epochs", "1", "--checkpoint", str(ck)]) == 2
    assert _one_line(capsys.readouterr().err).startswith(f"refattn nt: error: --epochs: the checkpoint {str(ck)!r}")
    shutil.copy(ck, tmp_path / "copy.npz")  # a copy of the one file is the whole checkpoint
    assert cli.main(NT + ["--epochs", "3", "--checkpoint", str(tmp_path / "copy.npz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["resumed_from"] == 1
