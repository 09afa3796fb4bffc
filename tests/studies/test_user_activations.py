"""An activation of your own goes wherever a built-in goes: every command that takes an activation.

A researcher's file (``FILE.py:NAME``) is accepted by every command with
``--activation`` or ``--activations``, beside the built-in names, at toy size;
the results record the file's SHA-256, so a resumed run refuses a changed
formula (a checkpoint, a results file); a file or name that cannot be used is
one line naming the option, exit code 2, before any work; from Python the
runners take the object itself; and a bad name is refused before any
activation trains.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from refattn.cli import main
from refattn.studies import polarity
from refattn.studies.nt_training import Settings as NTSettings, run_nt

pytestmark = pytest.mark.slow

#: A researcher's activation: g(s) = s, h(s) = sqrt(1 + s^2) (rho = s / sqrt(1 + s^2)), derivatives by hand.
FILE = '''
import autograd.numpy as anp
import refattn

def g(s):
    return 1.0 * s

def h(s):
    return anp.sqrt(1.0 + s * s)

def dg(s):
    return 1.0 + 0.0 * s

def dh(s):
    return s / anp.sqrt(1.0 + s * s)

algebraic = refattn.define_activation("algebraic", g, h, dg, dh, regularity="smooth")
WRONG = {"g": g, "h": h, "dh": lambda s: 1.0 + 0.0 * s}
'''


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(FILE)
    return f"{path}:algebraic"


def _json(capsys):
    out = capsys.readouterr().out
    return json.loads(out)


@pytest.fixture
def sst2_folder(tmp_path):
    """A few separable SST-2-like sentences (train and dev)."""
    rng = np.random.default_rng(0)
    rows = [(y, f"{'good' if y else 'bad'}{rng.integers(3)} w{i} film") for i, y in
            enumerate(rng.integers(0, 2, 40))]
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for y, s in rows))
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for y, s in rows[:10]))
    return tmp_path


#: One tiny run of every command that takes an activation; ``{spec}`` is the file's activation.
COMMANDS = {
    "nt": ["nt", "--activation", "{spec}", "--seeds", "2", "--epochs", "3", "--eval-every", "3", "--n-test", "2"],
    "polarity": ["polarity", "--activations", "softmax,{spec}", "--seeds", "1", "--epochs", "1"],
    "dynamics": ["dynamics", "--activations", "{spec}", "--steps", "3"],
    "interpret": ["interpret", "--activations", "{spec}", "--seeds", "1", "--epochs", "1", "--n-instances", "3",
                  "--draws", "2"],
    "properties": ["properties", "--activations", "{spec}"],
    "prop1": ["prop1", "--activations", "{spec}"],
    "prop2": ["prop2", "--activations", "softmax,{spec}"],
    "rank-collapse": ["rank-collapse", "--activations", "{spec}", "--depth", "2", "--n", "6", "--d", "4",
                      "--seeds", "1", "--inputs", "1"],
    "lm": ["lm", "--data", "toy", "--activations", "softmax,{spec}", "--seeds", "1", "--steps", "2",
           "--layers", "1", "--width", "8", "--heads", "2", "--n-ctx", "8", "--eval-every", "2",
           "--eval-windows", "2", "--final-windows", "2", "--ngram-orders", "2"],
    "sst2": ["sst2", "--data", "{sst2}", "--activations", "{spec}", "--seeds", "1", "--epochs", "1"],
}


def _where(result, command):
    """Where each command's result names the activation it ran."""
    if command == "nt":
        return [result["attention"]]
    if command in ("polarity", "interpret", "sst2"):
        return list(result["activations"])
    if command == "dynamics":
        return [r["activation"] for r in result["rows"]]
    if command == "properties":
        return list(result["computed"])
    if command == "prop1":
        return [r["activation"] for r in result["rows"]]
    if command == "prop2":
        return list(result["log_rank"]["activations"])
    if command == "rank-collapse":
        return result["config"]["activations"]
    return result["order"]  # lm


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_with_an_activation_option_takes_a_files_activation(command, spec, sst2_folder, capsys):
    argv = [a.format(spec=spec, sst2=sst2_folder) for a in COMMANDS[command]] + ["--json"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "algebraic" in _where(_json(capsys), command)


@pytest.mark.parametrize("value, match", [
    ("{tmp}/missing.py:algebraic", "no such file"),
    ("{tmp}/mine.py:nope", "defines no 'nope'"),
    ("{tmp}/mine.py:WRONG", "WRONG in .* was refused when it was defined: dh: does not match autograd"),
    ("softmaxx", "'softmaxx' is not one of softmax, .* nor FILE.py:NAME"),
])
def test_an_activation_that_cannot_be_used_is_one_line_exit_2_before_any_work(value, match, spec, tmp_path, capsys,
                                                                              monkeypatch):
    trained = []
    monkeypatch.setattr(polarity, "train_classifier", lambda *a, **k: trained.append(a))
    value = value.format(tmp=tmp_path)
    assert main(["polarity", "--activations", f"softmax,{value}", "--seeds", "1", "--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("refattn polarity: error: --activations: "), err
    assert __import__("re").search(match, err), err
    assert trained == []  # refused before softmax, listed first, trained


def test_a_name_given_twice_is_refused(spec, tmp_path, capsys):
    assert main(["prop2", "--activations", f"{spec},{spec}"]) == 2
    assert "is given twice" in capsys.readouterr().err
    other = tmp_path / "copy.py"
    other.write_text(FILE)  # two files, one NAME: results keyed by name would mix them
    assert main(["prop2", "--activations", f"{spec},{other}:algebraic"]) == 2
    assert "--activations: 'algebraic' is given twice; each value once" in capsys.readouterr().err


def test_the_runners_take_the_object_itself(spec):
    from refattn.custom import load_activation  # noqa: PLC0415

    act = load_activation(spec)
    result = polarity.run_polarity(polarity.Settings(activations=("softmax", act), seeds=1, epochs=1))
    assert list(result["activations"]) == ["softmax", "algebraic"]
    assert result["settings"]["activations"][0] == "softmax"
    assert result["settings"]["activations"][1]["name"] == "algebraic"
    nt = run_nt(NTSettings(activation=act, seeds=1, epochs=2, eval_every=2, n_test=2))
    assert nt["attention"] == "algebraic" and nt["activation_file"]["file"] == "mine.py"


def test_a_checkpoint_records_the_files_hash_and_refuses_a_changed_formula(spec, tmp_path, capsys):
    path = spec.rpartition(":")[0]
    ck = tmp_path / "run.npz"
    argv = ["nt", "--activation", spec, "--seeds", "2", "--epochs", "4", "--eval-every", "2", "--n-test", "2",
            "--checkpoint", str(ck)]
    assert main(argv + ["--stop-after", "1", "--json"]) == 0, capsys.readouterr().err
    first = _json(capsys)
    assert len(first["activation_file"]["sha256"]) == 64
    assert main(argv + ["--json"]) == 0  # the same file: resumed
    assert _json(capsys)["resumed_from"] == 1
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("\n# the formula changed below\nh = lambda s: 2.0 + 0.0 * s\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "belongs to another run" in err and first["activation_file"]["sha256"] in err


def test_a_results_file_records_the_files_hash_and_refuses_a_changed_formula(spec, sst2_folder, tmp_path, capsys):
    results = tmp_path / "sweep.json"
    argv = ["sst2-sweep", "--data", str(sst2_folder), "--activations", f"softmax,{spec}", "--seeds", "2",
            "--embed-dims", "8", "--trainings", "adam/phrases", "--results", str(results)]
    assert main(argv + ["--json"]) == 0, capsys.readouterr().err
    saved = json.loads(results.read_text())
    assert saved["settings"]["activations"] == ["softmax", "algebraic"]
    record = saved["settings"]["activation_files"]["algebraic"]
    assert record["file"] == "mine.py" and len(record["sha256"]) == 64
    assert "embed=8 adam phrases algebraic" in saved["cells"]
    with open(spec.rpartition(":")[0], "a", encoding="utf-8") as fh:
        fh.write("# edited\n")
    assert main(argv) == 2
    assert "other settings (activation_files differ)" in capsys.readouterr().err


def test_a_runner_called_from_python_loads_every_activation_before_training_any(tmp_path, monkeypatch):
    trained = []
    monkeypatch.setattr(polarity, "train_classifier", lambda *a, **k: trained.append(a))
    with pytest.raises(ValueError, match="no such file"):
        polarity.run_polarity(polarity.Settings(activations=("softmax", f"{tmp_path}/gone.py:x"), seeds=1, epochs=1))
    assert trained == []
