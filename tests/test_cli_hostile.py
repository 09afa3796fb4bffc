"""Every command as a hostile user runs it, each in its own process: the same JSON under other thread
counts and hash seeds, and hypothesis-drawn argument vectors that end with exit 0 and valid output,
or exit 2 and one line on stderr, never a traceback and never a hang.

``REFATTN_FUZZ_EXAMPLES`` sets the number of argument vectors drawn per command (default 3)."""

import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refattn.studies import STUDIES, command_fields, option_name, study

from tests.support import TINY

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "instructor" / "solutions" / "01-softmax-vjp.py"

#: Every command at a tiny size; "SST2" stands for a tiny SST-2 folder. ``lm`` runs at its default
#: width: a width-8 model is too small for a threaded BLAS to split its matrix products, and the
#: final evaluation once ran outside the one-thread limit there; ``polarity`` with two activations
#: and two seeds.
COMMANDS = {**{c: list(a) for c, a in TINY.items()},
            "lm": ["--data", "toy", "--activations", "softmax", "--seeds", "2", "--steps", "2"],
            "polarity": ["--activations", "softmax,tanhmax", "--seeds", "2", "--epochs", "1"],
            "check": ["--activation", str(ROOT / "docs" / "examples" / "sharp_tanhmax.py") + ":sharp_tanhmax"],
            "exercises": []}


@pytest.fixture(scope="module")
def sst2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sst2")
    rows = "".join(f"{'good' if i % 2 else 'bad'} film w{i % 5} the end\t{i % 2}\n" for i in range(40))
    for split in ("train", "dev"):
        (folder / f"{split}.tsv").write_text("sentence\tlabel\n" + rows)
    return folder


def _refattn(argv, env=None, cwd=None, timeout=240):
    """``(exit code, stdout, stderr)`` of ``python -m refattn ARGV`` in a fresh process."""
    try:
        p = subprocess.run([sys.executable, "-m", "refattn", *argv], capture_output=True, text=True,
                           env={**os.environ, "MPLBACKEND": "Agg", **(env or {})}, cwd=cwd or ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", "", ""
    return p.returncode, p.stdout, p.stderr


# --------------------------------------------------------------------------
# The same JSON under any thread count and hash seed
# --------------------------------------------------------------------------

#: Keys whose values are wall-clock times or describe the machine, not the result: the only ones
#: that may differ between two runs of one command.
CLOCK = ("seconds", "time_ratio", "ms")


def _results_only(obj):
    if isinstance(obj, dict):
        return {k: _results_only(v) for k, v in obj.items()
                if not any(c in k for c in CLOCK) and k != "machine"}
    if isinstance(obj, list):
        return [_results_only(v) for v in obj]
    return obj


def _json_of(command, argv, env):
    code, out, err = _refattn([command, *argv, "--json"], env=env)
    assert code == 0, (command, env, err)
    return _results_only(json.loads(out))


def test_every_command_gives_the_same_json_under_other_thread_counts_and_hash_seeds(sst2):
    """The README's determinism statement, for every command: one run with one BLAS thread, one
    refattn thread and hash seed 0, another with three threads of each and another hash seed."""
    first = {"OPENBLAS_NUM_THREADS": "1", "REFATTN_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    other = {"OPENBLAS_NUM_THREADS": "3", "REFATTN_NUM_THREADS": "3", "PYTHONHASHSEED": "123",
             "OMP_NUM_THREADS": "3"}
    jobs = [(c, [str(sst2) if a == "SST2" else a for a in argv], env)
            for c, argv in COMMANDS.items() for env in (first, other)]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        done = list(pool.map(lambda job: _json_of(*job), jobs))
    for i, (command, _, _) in enumerate(jobs[::2]):
        assert done[2 * i] == done[2 * i + 1], f"refattn {command}: the JSON differs under {other}"


# --------------------------------------------------------------------------
# Hypothesis-drawn argument vectors
# --------------------------------------------------------------------------

#: What a hostile user types where a value goes. Every value is small, so that an argument vector
#: that is valid still runs at the tiny size (a large one is the memory estimates' business).
HOSTILE = ["0", "-1", "1", "2", "-0", "1.5", "0.5", "nan", "inf", "-inf", "1e400", "", " ", "abc", ",", "1,1",
           "a,a", "softmax,softmax", "softmax,,tanhmax", "ü", "1e-300", "0x10", "1_0", "--json", "-", "/",
           "/nonexistent/dir/x", "x.npz", "sub/x.json"]


def _options(command):
    if command in STUDIES:
        return [option_name(f) for f in command_fields(study(command).Settings)
                if not f.metadata.get("positional")] + (["--out"] if hasattr(study(command), "plot") else [])
    return {"check": ["--seed", "--activation"], "exercises": EXERCISE_OPTIONS}[command]


#: The options of ``refattn exercises export`` and ``check`` the fuzz edits.
EXERCISE_OPTIONS = ["--exercises", "--points", "--course", "--due", "--hidden-weight", "--timeout", "--hidden-seed",
                    "--student", "--gradescope", "--answer-key", "--required-cases", "--hidden-visibility"]


@st.composite
def argument_vectors(draw, command):
    """The tiny argument vector of ``command`` with one to three hostile edits."""
    argv = list(COMMANDS[command])
    for _ in range(draw(st.integers(1, 3))):
        edit = draw(st.sampled_from(["value", "add", "drop", "token"]))
        value = draw(st.sampled_from(HOSTILE))
        values = [i + 1 for i, a in enumerate(argv[:-1]) if a.startswith("--") and not argv[i + 1].startswith("--")]
        if edit == "value" and values:
            argv[draw(st.sampled_from(values))] = value
        elif edit == "add" and _options(command):
            argv += [draw(st.sampled_from(_options(command))), value]
        elif edit == "drop" and argv and command == "exercises":
            argv.pop(draw(st.integers(0, len(argv) - 1)))
        else:
            argv.insert(draw(st.integers(0, len(argv))), value)
    if command == "exercises":
        form = draw(st.sampled_from(["list", "check", "student", "gradescope", "try"]))
        if form == "check":
            argv = ["check", draw(st.sampled_from(["softmax-vjp", "1", "99", "", "nonesuch"])),
                    draw(st.sampled_from([str(SOLUTION), "missing.py", "", "/"]))] + argv
        elif form in ("student", "gradescope"):
            target = "--student" if form == "student" else "--gradescope"
            argv = ["export", target, draw(st.sampled_from(["h", "g.zip", "", ".", "/nonexistent/x"])),
                    "--exercises", "01"] + argv
        elif form == "try":
            argv = ["try-gradescope", draw(st.sampled_from(["g.zip", "", "/", "missing.zip"]))] + argv
    return argv + draw(st.sampled_from([["--json"], []]))


def _check_outcome(command, argv, code, out, err):
    shown = f"refattn {command} {' '.join(repr(a) for a in argv)}"
    assert code != "timeout", f"{shown}: no answer within the time limit"
    assert "Traceback" not in err, f"{shown}: a traceback\n{err}"
    if code == 0:
        if "--json" in argv and not any(a.startswith("-") and a not in ("--json",) and a in ("-h", "--help")
                                        for a in argv):
            json.loads(out)  # strict JSON
        return
    ok = {2} | ({1} if command in ("check", "exercises") else set())  # 1: a check failed, an answer is wrong
    assert code in ok, f"{shown}: exit code {code}\n{err}"
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1, f"{shown}: {len(lines)} lines on stderr\n{err}"
        assert lines[0].startswith("refattn"), f"{shown}: {lines[0]}"
        assert _names_what_was_given(lines[0], argv), f"{shown}: the message names no option or value given"


def _names_what_was_given(line, argv):
    """A refusal begins with an option (or a positional argument's metavar), a value or file the user
    gave, or argparse's own words; never with the name of a parameter inside refattn (``n_heads: ...``)."""
    head = line.split("error: ", 1)[1] if "error: " in line else line
    first = head.split(": ", 1)[0].strip("'")
    return (first.startswith(("--", "argument ", "REFATTN_")) or "/" in first or first in ("stdout", "figure")
            or first.split(".")[0].isupper()  # a positional argument by its metavar: FILE, NAME, FILE.zip
            or head.startswith(("the following arguments", "unrecognized arguments", "invalid choice"))
            or any(first and first in a for a in argv))


EXAMPLES = int(os.environ.get("REFATTN_FUZZ_EXAMPLES", "3"))


@pytest.mark.parametrize("command", list(COMMANDS))
def test_hostile_argument_vectors_end_in_valid_output_or_one_line(command, sst2, tmp_path_factory):
    cwd = tmp_path_factory.mktemp(f"fuzz-{command}")  # files the fuzz names land here

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(argv=argument_vectors(command))
    def check(argv):
        argv = [str(sst2) if a == "SST2" else a for a in argv]
        code, out, err = _refattn([command, *argv], cwd=cwd, timeout=180)
        _check_outcome(command, argv, code, out, err)

    check()


@pytest.mark.parametrize("command", ["check", "prop1"])
def test_stdout_closed_from_the_start_is_one_line_and_exit_2(command):
    """``refattn COMMAND >&-``: the output could go nowhere, so it is refused as a full disk is, before any work."""
    r = subprocess.run(["sh", "-c", f"'{sys.executable}' -m refattn {command} >&-"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"refattn {command}: error: stdout: closed (redirect it to /dev/null to discard the output)"], r.stderr
