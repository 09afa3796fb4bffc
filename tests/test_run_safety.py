"""Runs that survive their users: durable checkpoints (a failed or killed save leaves a checkpoint
that resumes), one writer per file (a second run on a checkpoint, results file or --out folder is
refused at once, naming the path), every setting checked before any work, memory estimated
before any allocation, Ctrl-C and closed streams answered in one line, and the reproductions of
each of these defects as they were found."""

import contextlib
import dataclasses
import errno
import importlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import tracemalloc
import typing

import numpy as np
import pytest
from tests.support import wait_for

from refattn import cli
from refattn.studies import RANGE_RULES, STUDIES, command_fields, option_name, study
from refattn.training import runs
from refattn.training.train import load_checkpoint

from tests.support import default_sigint
from tests.support import TINY
from tests.training.toy import run

pytestmark = pytest.mark.slow

TESTS = pathlib.Path(__file__).resolve().parent
ROOT = TESTS.parent
PY = sys.executable


def _one_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _same_run(a, b):
    """Two toy runs' parameters are equal bit for bit."""
    return all(np.array_equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------
# Durable checkpoints
# --------------------------------------------------------------------------


def test_a_resume_whose_first_save_fails_leaves_the_earlier_checkpoint_resumable(tmp_path, monkeypatch):
    """10 epochs saved, then a resume whose first save fails (a full disk): the earlier checkpoint is
    the one on disk, whole, and resumes."""
    ck = tmp_path / "run.npz"
    run(epochs=10, checkpoint=ck)
    before = load_checkpoint(ck)
    real = os.replace

    def full_disk(src, dst, *a, **kw):
        if str(dst).endswith(".npz"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(runs.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left on device") as failed:
        run(epochs=12, checkpoint=ck)
    assert failed.value.filename == str(ck)  # the error names the file, not "[Errno 28]" alone
    monkeypatch.setattr(runs.os, "replace", real)
    after = load_checkpoint(ck)
    assert after["epoch"] == before["epoch"] == 9 and after["history"] == before["history"]
    assert not [p for p in os.listdir(tmp_path) if ".partial-" in p]
    params, out = run(epochs=12, checkpoint=ck)
    assert out["resumed_from"] == 9 and _same_run(params, run(epochs=12)[0])


KILL_CHILD = r"""
import os, signal, sys
sys.path.insert(0, {tests!r} + "/training")  # test_train, the toy model
from tests.training.toy import run
from refattn.training import runs

point, ck, epochs, at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
saves = [0]
real_replace = os.replace

def replace(src, dst, *a, **kw):
    saves[0] += 1
    if saves[0] == at and point == "before the .npz is renamed":
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst, *a, **kw)
    if saves[0] == at and point == "after the .npz is renamed":
        os.kill(os.getpid(), signal.SIGKILL)

runs.os.replace = replace
run(epochs=epochs, checkpoint=ck)
"""


@pytest.mark.parametrize("point", ["before the .npz is renamed", "after the .npz is renamed"])
@pytest.mark.parametrize("case", ["first save of a fresh run", "third save of a fresh run",
                                  "first save of a resumed run"])
def test_a_save_killed_at_any_point_leaves_a_checkpoint_that_resumes_bit_for_bit(point, case, tmp_path):
    """SIGKILL at each step of a save: the checkpoint on disk loads (the previous one, or the new
    one), a resumed run ends bit for bit where an uninterrupted one does, and the temporary the
    killed save left is gone once the next run has locked the checkpoint."""
    ck = tmp_path / "run.npz"
    at = 3 if case.startswith("third") else 1
    if case.endswith("resumed run"):
        run(epochs=3, checkpoint=ck)
    child = subprocess.run([PY, "-c", KILL_CHILD.format(tests=str(TESTS)), point, str(ck), "6", str(at)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    if at == 1 and case.startswith("first save of a fresh") and point == "before the .npz is renamed":
        assert not ck.exists()  # nothing was saved yet: the next run starts afresh
    else:
        load_checkpoint(ck)  # loads, whatever the kill left
    params, out = run(epochs=6, checkpoint=ck)
    assert _same_run(params, run(epochs=6)[0])
    assert load_checkpoint(ck)["history"] == json.loads(json.dumps(run(epochs=6)[1]["history"]))
    assert not [p for p in os.listdir(tmp_path) if ".partial-" in p]


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (root only; skipped where it cannot be mounted)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def _fill(folder, leave=0):
    """Fill the file system of ``folder`` but for ``leave`` bytes; return the filler's path."""
    filler = folder / "filler"
    with open(filler, "wb") as fh:
        with contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
        with contextlib.suppress(OSError):
            fh.close()
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


NT_TINY = ["nt", "--task", "N2T1", "--context", "4", "--seeds", "1", "--eval-every", "1", "--n-test", "2"]


def _without_clock(obj):
    if isinstance(obj, dict):
        return {k: _without_clock(v) for k, v in obj.items()
                if "seconds" not in k and k not in ("resumed_from", "checkpoint")}
    if isinstance(obj, list):
        return [_without_clock(v) for v in obj]
    return obj


def test_a_full_disk_during_a_save_keeps_the_checkpoint_and_names_the_file(small_disk, tmp_path, capsys):
    """A disk with no room for the next save fails at that save in one line naming the file, what was kept
    and how to go on; the checkpoint before it is whole, no temporary is left, and the run resumes bit for
    bit."""
    ck = small_disk / "ck.npz"
    assert cli.main(NT_TINY + ["--epochs", "3", "--checkpoint", str(ck)]) == 0
    capsys.readouterr()
    filler = _fill(small_disk)
    assert cli.main(NT_TINY + ["--epochs", "6", "--checkpoint", str(ck), "--json"]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"refattn nt: error: {ck}: No space left on device; kept {ck} (3 epochs trained); to go on, run the same "
        f"command again: refattn nt " + " ".join(NT_TINY[1:]) + f" --epochs 6 --checkpoint {ck} --json")
    assert load_checkpoint(ck)["epoch"] == 2
    assert not [p for p in os.listdir(small_disk) if ".partial-" in p]
    filler.unlink()
    assert cli.main(NT_TINY + ["--epochs", "6", "--checkpoint", str(ck), "--json"]) == 0
    resumed = json.loads(capsys.readouterr().out)
    assert resumed["resumed_from"] == 2
    assert cli.main(NT_TINY + ["--epochs", "6", "--json"]) == 0
    assert _without_clock(resumed) == _without_clock(json.loads(capsys.readouterr().out))
    assert sorted(os.listdir(small_disk)) == ["ck.npz", "ck.npz.lock"]


def test_stale_temporaries_of_a_killed_run_are_removed_by_the_next_writer_and_never_read(tmp_path):
    ck = tmp_path / "run.npz"
    run(epochs=2, checkpoint=ck)
    stale = [tmp_path / "run.npz.partial-99999-1"]
    for p in stale:
        p.write_bytes(b"half a file")
    assert load_checkpoint(ck)["epoch"] == 1  # never read
    run(epochs=3, checkpoint=ck)
    assert not any(p.exists() for p in stale)
    results = tmp_path / "cells.json"
    junk = tmp_path / "cells.json.partial-99999-1"
    junk.write_text("{")
    with runs.session():
        runs.CellStore(results, {"a": 1})
    assert not junk.exists()


# --------------------------------------------------------------------------
# One writer per file
# --------------------------------------------------------------------------

HOLDER = r"""
import contextlib, sys
from refattn.training.runs import locked
with contextlib.ExitStack() as stack:
    for arg in sys.argv[1:]:
        folder = arg.startswith("dir:")
        stack.enter_context(locked(arg[4:] if folder else arg, folder=folder))
    print("ready", flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def _held_by_another_process(*paths):
    holder = subprocess.Popen([PY, "-c", HOLDER, *map(str, paths)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        yield holder.pid
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def test_a_second_run_on_a_checkpoint_results_file_or_out_folder_is_refused_at_once(tmp_path, capsys):
    ck, ckdir, out = tmp_path / "nt.npz", tmp_path / "cks", tmp_path / "out"
    results = {c: tmp_path / f"{c}.json" for c in ("nt-sensitivity", "lm-study", "sst2-sweep")}
    ckdir.mkdir()
    cases = [
        (NT_TINY + ["--epochs", "2", "--checkpoint", str(ck)], "--checkpoint", ck),
        (["polarity"] + TINY["polarity"] + ["--checkpoint-dir", str(ckdir)], "--checkpoint-dir",
         ckdir / "polarity_softmax.npz"),
        (["polarity"] + TINY["polarity"] + ["--out", str(out)], "--out", out),
        (["nt-sensitivity"] + TINY["nt-sensitivity"] + ["--results", str(results["nt-sensitivity"])], "--results",
         results["nt-sensitivity"]),
        (["lm-study"] + TINY["lm-study"] + ["--results", str(results["lm-study"])], "--results",
         results["lm-study"]),
        (["sst2-sweep", "--data", str(tmp_path), "--results", str(results["sst2-sweep"])], "--results",
         results["sst2-sweep"]),
    ]
    out.mkdir()
    locked = [ck, ckdir / "polarity_softmax.npz", f"dir:{out}", *results.values()]
    with _held_by_another_process(*locked) as pid:
        for argv, option, path in cases:
            assert cli.main(argv) == 2
            err = _one_line(capsys.readouterr().err)
            assert f"{option}: " in err and str(path) in err and "is in use by another run" in err, err
    assert not ck.exists() and not (ckdir / "polarity_softmax.npz").exists()  # nothing was trained
    assert not (out / "polarity.json").exists() and not any(p.exists() for p in results.values())
    # the holder is gone: its locks went with it, and a run goes ahead
    assert cli.main(NT_TINY + ["--epochs", "2", "--checkpoint", str(ck)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["cks", "nt.npz", "out"]


def test_two_refattn_processes_on_one_checkpoint_and_out_folder(tmp_path):
    """A real second process is refused, naming the file; Ctrl-C then stops the
    first in one line that names what it kept and the command that resumes it (exit code 130)."""
    argv = NT_TINY + ["--epochs", "100000", "--eval-every", "50000", "--checkpoint", "ck.npz", "--out", "out"]
    first = subprocess.Popen([PY, "-m", "refattn", *argv], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        wait_for((tmp_path / "ck.npz").exists, "the first process's first checkpoint", proc=first)
        second = subprocess.run([PY, "-m", "refattn", *argv], cwd=tmp_path, capture_output=True, text=True,
                                timeout=120)
        assert second.returncode == 2 and second.stdout == ""
        assert "'ck.npz' is in use by another run (lock file " in _one_line(second.stderr)
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130
    line = _one_line(err)
    assert line.startswith("refattn nt: interrupted; kept ck.npz (") and "epochs trained" in line
    assert line.endswith("to resume, run the same command again: refattn " + " ".join(argv))
    assert load_checkpoint(tmp_path / "ck.npz")["epoch"] >= 0
    assert sorted(os.listdir(tmp_path)) == ["ck.npz", "ck.npz.lock", "out"]  # no temporary; the lock file stays
    with _held_by_another_process(tmp_path / "ck.npz", f"dir:{tmp_path / 'out'}"):
        pass  # released


def _refused_elsewhere(path):
    """Whether another process is refused the lock of ``path`` now."""
    p = subprocess.run([PY, "-c", HOLDER, str(path)], input="", capture_output=True, text=True, timeout=60)
    return p.returncode != 0 and "is in use by another run" in p.stderr


def test_locks_are_reentrant_within_a_process_and_released_after_it(tmp_path):
    path = tmp_path / "x.json"
    with runs.locked(path), runs.locked(path):
        assert _refused_elsewhere(path)
    assert not _refused_elsewhere(path)
    with runs.session() as claimed:
        runs.claim(path, "--results")
        runs.claim(path, "results")
        assert runs.held_paths() == [("--results", str(path))] and len(claimed) == 2
        assert _refused_elsewhere(path)
    assert not _refused_elsewhere(path)


# --------------------------------------------------------------------------
# Everything checked before the first unit of work
# --------------------------------------------------------------------------


def _number_fields(cls):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)] if typing.get_origin(tp) in (
            typing.Union, getattr(__import__("types"), "UnionType")) else [tp]
        tp = args[0]
        kinds = typing.get_args(tp) if typing.get_origin(tp) is tuple else (tp,)
        if tp is not bool and any(k in (int, float) for k in kinds):
            yield f, tp


@pytest.mark.parametrize("command", list(STUDIES))
def test_every_number_option_declares_its_range(command):
    for f, tp in _number_fields(study(command).Settings):
        assert any(k in f.metadata for k in RANGE_RULES), f"{command} {option_name(f)} has no range"


def _bad_values(f, tp):
    """Values a hostile user types for the field ``f``, each of which must be refused."""
    meta = f.metadata
    if typing.get_origin(tp) is tuple and typing.get_args(tp)[-1] is Ellipsis:
        kind = typing.get_args(tp)[0]
        if kind is str:
            return ["", ",", "a,,b"] + ([f"{f.default[0]},{f.default[0]}"] if f.default else [])
        good = "1" if kind is int else "0.5"
        return ["", "nan", "inf", f"{good},{good}"] + (["0"] if meta.get("positive") or meta.get("low", 0) > 0 else [])
    if typing.get_origin(tp) is tuple or tp is bool:
        return []
    if tp is str:
        return ["", "   "] if "choices" not in meta else ["", "nonesuch"]
    values = ["nan", "inf", "-inf", "", "abc"]
    if "low" in meta:
        values.append(str(meta["low"] - 1))
    if meta.get("positive"):
        values += ["0", "-1e-300"]
    return values


def _bad_cases():
    for command in STUDIES:
        cls = study(command).Settings
        hints = typing.get_type_hints(cls)
        for f in command_fields(cls):  # the options the command line has
            tp = hints[f.name]
            if typing.get_origin(tp) in (typing.Union, __import__("types").UnionType):
                tp = [a for a in typing.get_args(tp) if a is not type(None)][0]
            for value in _bad_values(f, tp):
                yield command, f, value


@pytest.mark.parametrize("command", list(STUDIES))
def test_every_bad_value_is_refused_in_one_line_naming_the_option_before_any_work(command, monkeypatch, capsys,
                                                                                  tmp_path):
    module = study(command)
    monkeypatch.setattr(module, "run", lambda *a, **kw: pytest.fail(f"{command} started work"))
    base = [str(tmp_path) if a == "SST2" else a for a in TINY[command]]
    tried = 0
    for cmd, f, value in _bad_cases():
        if cmd != command:
            continue
        option = option_name(f)
        if f.metadata.get("positional"):
            argv = [command, value] + base[1:]
        elif option in base:
            argv = [command] + base
            argv[argv.index(option) + 1] = value
        else:
            argv = [command] + base + [option, value]
        try:
            code = cli.main(argv)
        except SystemExit as stop:  # argparse's own refusal (not a number, not a choice)
            code = stop.code
        err = _one_line(capsys.readouterr().err)
        assert code == 2, (argv, err)
        assert option in err, (argv, err)
        tried += 1
    assert tried or not list(_number_fields(module.Settings))


def test_the_reproductions_are_refused_with_what_the_user_typed(capsys):
    for argv, expected in ((["nt", "--n-test", "0"], "refattn nt: error: --n-test: expected an integer >= 1, got 0"),
                           (["dynamics", "--eta", "inf"], "refattn dynamics: error: --eta: expected a finite number"),
                           (["lm-study", "--data", "toy", "--long-evals", "0"],
                            "refattn lm-study: error: --long-evals: expected an integer >= 1, got 0"),
                           (["polarity", "--activations", "softmax,softmax"], "'softmax' is given twice"),
                           (["geometry", "--cs", "1,1.0"], "--cs: 1.0 is given twice"),
                           (["nt-sensitivity", "fig4", "--lrs", "0.1,0.1"], "--lrs: 0.1 is given twice")):
        assert cli.main(argv) == 2
        err = _one_line(capsys.readouterr().err)
        assert expected in err, err
        assert "init:" not in err and "shape" not in err


def test_an_unwritable_results_file_is_refused_before_the_first_cell(tmp_path, capsys, monkeypatch):
    """nt-sensitivity, lm-study and sst2-sweep used to train their first cell, then fail to save it."""
    (tmp_path / "afile").write_text("")
    for command in ("nt-sensitivity", "lm-study", "sst2-sweep"):
        monkeypatch.setattr(study(command), "run", lambda *a, **kw: pytest.fail("work started"))
        argv = [command] + [str(tmp_path) if a == "SST2" else a for a in TINY[command]]
        for bad in (tmp_path / "afile" / "r.json", tmp_path):
            assert cli.main(argv + ["--results", str(bad)]) == 2
            err = _one_line(capsys.readouterr().err)
            assert f"refattn {command}: error: --results: " in err and str(bad) in err, err


def test_a_checkpoint_of_another_run_names_the_file_not_an_argument(tmp_path, capsys):
    ck = tmp_path / "ck.npz"
    assert cli.main(NT_TINY + ["--epochs", "2", "--checkpoint", str(ck)]) == 0
    assert cli.main(NT_TINY + ["--epochs", "2", "--checkpoint", str(ck), "--init-scale", "0.5"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "belongs to another run" in err and str(ck) in err and "resume=" not in err


def test_gpu_without_cupy_is_one_line(capsys):
    from refattn.core.backend import cupy_available

    if cupy_available():
        pytest.skip("this machine has CuPy and a GPU")
    for argv in (["nt", "--device", "gpu"], ["nt-figure", "fig4", "--device", "gpu"]):
        assert cli.main(argv) == 2
        err = _one_line(capsys.readouterr().err)
        assert "--device: 'gpu' needs CuPy and a CUDA device" in err


@pytest.mark.parametrize("argv", [
    ["interpret", "--seeds", "100000"],
    ["rank-collapse", "--n", "100000"],
    ["geometry", "--n-random", "1000000000"],
    ["prop2", "--m", "1000000000"],
    ["neural-surface", "--n-train", "1000000000"],
    ["nt-cycles", "--N", "16", "--tau", "12"],
    ["signexp-at-zero", "--n", "1000000000000"],
    ["neural-cost", "--batch", "1000000"],
    ["sst2", "--data", "SST2", "--seeds", "100000000"],
    ["sst2-sweep", "--data", "SST2", "--seeds", "100000000"],
    ["nt-figure", "fig4", "--seeds", "1000000000"],
    ["nt-sensitivity", "fig4", "--seeds", "1000000000"],
    ["lm-study", "--data", "toy", "--seeds", "1000000000"],
])
def test_every_command_that_allocates_per_seed_or_size_refuses_too_much_before_any_work(argv, tmp_path, capsys):
    folder = tmp_path / "sst2"
    folder.mkdir()
    rows = "".join(f"{'good' if i % 2 else 'bad'} film w{i}\t{i % 2}\n" for i in range(20))
    for split in ("train", "dev"):
        (folder / f"{split}.tsv").write_text("sentence\tlabel\n" + rows)
    argv = [str(folder) if a == "SST2" else a for a in argv]
    assert cli.main(argv) == 2
    err = _one_line(capsys.readouterr().err)
    assert "needs about" in err and "--max-memory" in err, err


def test_every_study_whose_memory_grows_with_its_settings_has_max_memory():
    """Only the studies of fixed size (the propositions' numbers, the four properties, the score
    dynamics on fixed data) go without a memory estimate; every other one can be told its limit."""
    fixed = {"prop1", "properties", "dynamics"}
    for command in STUDIES:
        has = "max_memory" in {f.name for f in dataclasses.fields(study(command).Settings)}
        assert has == (command not in fixed), command


def _peak(fn):
    tracemalloc.start()
    try:
        with np.errstate(all="ignore"):
            fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_new_memory_estimates_bound_the_measured_peaks(tmp_path):
    """Each estimate is at least the peak tracemalloc measures and at most 4 times it, at sizes
    other than those its constants were read from (neural-cost measures with tracemalloc itself;
    its estimate is its own analytic peak, tested in tests/studies/test_neural_cost.py)."""
    from refattn.studies import (geometry, interpret, neural_surface, nt_cycles, prop2, rank_collapse,
                                 signexp_zero, sst2, sst2_sweep)
    from refattn.training.classifier import classifier_memory

    importlib.import_module("scipy.optimize")  # rank-collapse's linear programmes: a library's import is no run's peak
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(200)]
    lines = []
    for _ in range(1500):
        y = int(rng.integers(2))
        lines.append(f"{('bad', 'good')[y]} " + " ".join(rng.choice(words, int(rng.integers(3, 16)))) + f"\t{y}\n")
    for split, n in (("train", 1500), ("dev", 200)):
        (tmp_path / f"{split}.tsv").write_text("sentence\tlabel\n" + "".join(lines[:n]))
    tokens = {}

    def sst2_run():
        r = sst2.run(sst2.Settings(data=str(tmp_path), activations=("softmax",), seeds=3, epochs=1), progress=False)
        tokens["sst2"] = 3, r["data"]["train"] * r["data"]["train_padded_length"] + r["data"]["dev"] * r["data"][
            "dev_padded_length"]

    cases = {
        "rank-collapse": (lambda: rank_collapse.run(rank_collapse.Settings(
            activations=("softmax",), architectures=("pure",), depth=1, n=24, d=8, seeds=1, inputs=1)),
            lambda: rank_collapse.memory_estimate(24, 8, depth=1, seeds=1, inputs=1, architectures=1)),
        "geometry": (lambda: geometry.run(geometry.Settings(cs=(1.0,), n_keys=100, dim=96, n_random=6000)),
                     lambda: geometry.memory_estimate(100, 1, 96, 6000)),
        "prop2": (lambda: prop2.run(prop2.Settings(activations=("softmax",), n=40, d=8, m=3000)),
                  lambda: prop2.memory_estimate(40, 8, 3000)),
        "neural-surface": (lambda: neural_surface.run(neural_surface.Settings(n_train=2000, n_test=500,
                                                                              hidden_size=100, steps=2)),
                           lambda: neural_surface.memory_estimate(2000, 500, 100)),
        "nt-cycles": (lambda: nt_cycles.run(nt_cycles.Settings(N=8, tau=5)), lambda: nt_cycles.memory_estimate(8, 5)),
        "signexp-at-zero": (lambda: signexp_zero.run(signexp_zero.Settings(n=20000)),
                            lambda: signexp_zero.memory_estimate(20000)),
        "interpret": (lambda: interpret.run(interpret.Settings(activations=("softmax",), seeds=2, epochs=1,
                                                               n_instances=250, draws=150), progress=False),
                      lambda: interpret.memory_estimate(2, 2000 * 12, 250, 150, 12)),
        "sst2": (sst2_run, lambda: classifier_memory(*tokens["sst2"])),
        "sst2-sweep": (lambda: sst2_sweep.run(sst2_sweep.Settings(
            data=str(tmp_path), activations=("softmax",), seeds=2, embed_dims=(150,), trainings=("adam/phrases",)),
            progress=False), lambda: classifier_memory(2, 1500 * sst2.DEFAULTS["max_len"] + 200 * 16, 150)),
    }
    for name, (fn, estimate) in cases.items():
        peak = _peak(fn)
        assert peak <= estimate() <= 4 * peak, (name, peak, estimate())


# --------------------------------------------------------------------------
# Signals and streams
# --------------------------------------------------------------------------


def _refattn(*argv, shell_redirect="", env=None, timeout=300):
    """``refattn ARGV`` in a shell, with ``shell_redirect`` applied (``>&-`` closes stdout)."""
    cmd = " ".join([f"'{PY}'", "-m", "refattn", *(f"'{a}'" for a in argv)]) + " " + shell_redirect
    return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def test_a_closed_or_full_output_ends_in_at_most_one_line():
    closed = _refattn("prop1", "--json", shell_redirect=">&-")
    assert closed.returncode == 2
    assert _one_line(closed.stderr).startswith("refattn prop1: error: stdout: closed")
    no_stderr = _refattn("prop1", "--seed", "-1", shell_redirect="2>&-")
    assert no_stderr.returncode == 2 and no_stderr.stdout == ""  # the error goes nowhere, never to stdout
    full = _refattn("prop1", shell_redirect=">/dev/full")
    assert full.returncode == 2
    assert _one_line(full.stderr) == "refattn prop1: error: stdout: No space left on device"
    both = _refattn("nt", "--seeds", "0", shell_redirect=">&- 2>&-")
    assert both.returncode == 2 and both.stdout == both.stderr == ""


IMPORT_INTERRUPTED = r"""
import builtins, sys
real = builtins.__import__

def interrupted(name, *args, **kwargs):
    if name == "numpy" or name.startswith("numpy."):
        raise KeyboardInterrupt
    return real(name, *args, **kwargs)

from refattn.cli import main
assert "numpy" not in sys.modules, "importing the command line must not import NumPy"
builtins.__import__ = interrupted
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_while_refattn_is_still_importing_is_one_line_and_exit_130():
    p = subprocess.run([PY, "-c", IMPORT_INTERRUPTED, "nt", "--seeds", "1"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 130 and p.stdout == ""
    assert _one_line(p.stderr).startswith("refattn")
    assert "interrupted; nothing was saved" in p.stderr


def test_ctrl_c_says_what_was_kept_for_each_kind_of_output(tmp_path, monkeypatch, capsys):
    """In-process: the study raises KeyboardInterrupt after its first piece; the line names the
    results file and the checkpoint it kept, or says how a run could have been kept."""
    import refattn.studies.polarity as pol

    cli.build_parser()
    real = pol.train_classifier

    def interrupted(tokens, labels, vocab, activation, **kw):
        if activation == "tanhmax":
            raise KeyboardInterrupt
        return real(tokens, labels, vocab, activation, **kw)

    monkeypatch.setattr(pol, "train_classifier", interrupted)
    argv = ["polarity", "--activations", "softmax,tanhmax", "--seeds", "1", "--epochs", "1"]
    assert cli.main(argv) == 130
    assert _one_line(capsys.readouterr().err) == ("refattn polarity: interrupted; nothing was saved "
                                                  "(--checkpoint-dir DIR makes a run resumable)")
    out, ckdir = tmp_path / "out", tmp_path / "cks"
    assert cli.main(argv + ["--out", str(out), "--checkpoint-dir", str(ckdir)]) == 130
    line = _one_line(capsys.readouterr().err)
    assert f"kept {out}/polarity.json (1 finished pieces)" in line
    assert f"{ckdir}/polarity_softmax.npz (1 epochs trained)" in line
    assert line.endswith("to resume, run the same command again: refattn " + " ".join(
        argv + ["--out", str(out), "--checkpoint-dir", str(ckdir)]))
    with _held_by_another_process(f"dir:{out}", ckdir / "polarity_softmax.npz"):
        pass  # the interrupted command released its locks
    early = tmp_path / "early"
    argv = ["polarity", "--activations", "tanhmax,softmax", "--seeds", "1", "--epochs", "1", "--checkpoint-dir",
            str(early)]
    assert cli.main(argv) == 130
    assert _one_line(capsys.readouterr().err) == (
        f"refattn polarity: interrupted before anything was saved to {early}/polarity_tanhmax.npz, "
        f"{early}/polarity_softmax.npz; run the same command again to start: refattn {' '.join(argv)}")


def test_an_activation_file_that_calls_sys_exit_is_refused_in_one_line(tmp_path, capsys):
    """The reproduction: ``refattn check --activation F.py:x`` with sys.exit(0) in F exited 0,
    silently. A file that exits while it is imported cannot be used (one line, exit 2); an activation
    whose g exits when called is a failed check of that activation (exit 1, the report saying so), as
    the Verify page's exit codes read."""
    path = tmp_path / "f.py"
    path.write_text("import sys\nsys.exit(0)\n")
    assert cli.main(["check", "--activation", f"{path}:x"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "--activation" in err and "sys.exit(0)" in err
    path.write_text("import sys\nimport autograd.numpy as anp\nx = {'g': lambda s: sys.exit(0), 'h': anp.exp}\n")
    assert cli.main(["check", "--activation", f"{path}:x"]) == 1
    out = capsys.readouterr().out
    assert "g: called sys.exit(0)" in out and "check FAILED" in out


def test_a_diverged_lm_prints_no_verdict(capsys):
    with np.errstate(all="ignore"):  # the divergence itself warns
        assert cli.main(["lm", "--data", "toy", "--activations", "softmax,tanhmax", "--seeds", "2", "--steps", "20",
                         "--layers", "1", "--width", "8", "--lr", "1000"]) == 0
    text = capsys.readouterr().out
    verdicts = [line for line in text.splitlines() if "TanhMax Table 4" in line]
    assert verdicts and all("no verdict" in line and "diverged" in line for line in verdicts), text
    assert "same direction" not in text and "within noise" not in text and "OPPOSITE" not in text


def test_out_on_a_grids_results_file_says_whose_it_is_while_it_runs_and_after(tmp_path, capsys):
    """``--results DIR/nt-sensitivity.json`` running, then ``--out DIR``: "in use" while the grid runs, and
    after it, that the file is a grid's results file (never "not a results file of refattn")."""
    out = tmp_path / "d"
    grid_file = out / "nt-sensitivity.json"
    argv = ["nt-sensitivity"] + TINY["nt-sensitivity"]
    assert cli.main(argv + ["--results", str(grid_file)]) == 0
    before = grid_file.read_text()
    capsys.readouterr()
    with _held_by_another_process(grid_file):
        assert cli.main(argv + ["--out", str(out)]) == 2
        err = _one_line(capsys.readouterr().err)
        assert "--out: " in err and "is in use by another run" in err, err
    assert cli.main(argv + ["--out", str(out)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "--out: " in err and "is the results file of a grid" in err and f"--results {grid_file}" in err, err
    assert grid_file.read_text() == before


def test_a_disk_that_fills_mid_grid_says_what_was_kept_and_how_to_go_on(tmp_path, monkeypatch, capsys):
    path = tmp_path / "r.json"
    argv = ["nt-sensitivity"] + TINY["nt-sensitivity"] + ["--results", str(path)]
    real, saves = os.replace, []

    def full_disk(src, dst, *a, **kw):
        if str(dst) == str(path):
            saves.append(dst)
            if len(saves) > 1:  # the first cell is saved, the second is not
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(runs.os, "replace", full_disk)
    assert cli.main(argv) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"error: {path}: No space left on device; kept {path} (1 finished runs); to go on, run the same " \
           f"command again: refattn nt-sensitivity" in err, err
    monkeypatch.setattr(runs.os, "replace", real)
    assert len(json.loads(path.read_text())["cells"]) == 1
    assert cli.main(argv) == 0 and len(json.loads(path.read_text())["cells"]) == 2
