"""The course kit around the graders: answers run apart and cannot cheat their way to a pass,
Ctrl-C is one line, the student handout holds no solution, and the Gradescope autograder,
run in a folder laid out as Gradescope lays it out, writes valid results.

Every cheat is an answer a student who wants the points without the work could write. Each
must be graded wrong (exit 1, one line saying why, valid JSON with ``--json``) within the
time limit. The time limit in these tests is short (:data:`LIMIT`); an answer that runs over
it is reported as timed out, whatever the machine's speed.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import refattn
from refattn.cli import main as cli_main
from refattn.exercises import EXERCISES, exercise, grade, grade_many
from refattn.exercises.credit import credit
from refattn.exercises.export import (CONFIG_NAME, export_gradescope, solution_blocks, solution_path,
                                      solution_source, starter)
from refattn.exercises.graders import closure_shift
from refattn.exercises.gradescope import group_score
from refattn.exercises.judge import Drawn

from tests.support import default_sigint
from tests.exercises.teaching_checks import leaked, leaked_library
from tests.exercises.wrong_answers import WRONG

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 8  # seconds an answer has in these tests (a loaded CI machine must not time out a right answer)
PKG = os.path.dirname(refattn.__file__)
SOLUTION_01 = str(solution_path(exercise(1)))  # instructor/solutions/ in the clone

#: Answers to exercise 01 that try to get the points without the work, and a word the one
#: line saying why must contain.
CHEATS = {
    "sys.exit(0) at import": ("import sys\nsys.exit(0)\n", "sys.exit(0)"),
    "os._exit(0) in the function": ("import os\ndef softmax_vjp(s, u):\n    os._exit(0)\n",
                                    "exit status 0 while running softmax_vjp"),
    "import refattn": ("import refattn\nsoftmax_vjp = lambda s, u: refattn.activation('softmax').vjp(s, u)\n",
                       "refused: importing refattn"),
    "from refattn.core.activations import": (
        "from refattn.core.activations import activation\n"
        "def softmax_vjp(s, u):\n    return activation('softmax').vjp(s, u)\n", "refused: importing refattn"),
    "importlib.import_module": (  # refused, or not found where the answer's path holds no refattn
        "import importlib\nref = importlib.import_module('refattn')\n"
        "def softmax_vjp(s, u):\n    return ref.activation('softmax').vjp(s, u)\n", "refattn"),
    "__import__": ("r = __import__('refattn.core.activations', fromlist=['activation'])\n"
                   "softmax_vjp = lambda s, u: r.activation('softmax').vjp(s, u)\n", "refused: importing refattn"),
    "exec(open(library file))": (f"exec(open({os.path.join(PKG, 'core', 'activations.py')!r}).read())\n"
                                 "softmax_vjp = lambda s, u: activation('softmax').vjp(s, u)\n",
                                 "refused: reading"),
    "autograd's make_vjp": (
        "from autograd import make_vjp\nimport autograd.numpy as anp\n"
        "def softmax_vjp(s, u):\n"
        "    f = lambda x: anp.exp(x) / anp.sum(anp.exp(x), -1, keepdims=True)\n"
        "    return make_vjp(f)(s)[0](u)\n", "refused: importing autograd"),
    "loading the model solution": (
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('m', {SOLUTION_01!r})\n"
        "m = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(m)\nsoftmax_vjp = m.softmax_vjp\n",
        "refused: reading"),
    "the solution through /proc/self/root and ..": (
        f"p = '/proc/self/root' + {os.path.join(PKG, '..', 'instructor', 'solutions', '01-softmax-vjp.py')!r}\n"
        "ns = {}\nexec(open(p).read(), ns)\nsoftmax_vjp = ns['softmax_vjp']\n", "refused: reading"),
    "os.open relative to a directory descriptor": (
        f"import os\nfd = os.open({os.path.dirname(PKG)!r}, os.O_RDONLY)\n"
        "f = os.open('instructor/solutions/01-softmax-vjp.py', os.O_RDONLY, dir_fd=fd)\n"
        "ns = {}\nexec(os.read(f, 1 << 20).decode(), ns)\nsoftmax_vjp = ns['softmax_vjp']\n", "refused: os.open"),
    "a subprocess that imports refattn": (
        "import subprocess, sys\ndef softmax_vjp(s, u):\n"
        "    subprocess.run([sys.executable, '-c', 'import refattn'])\n    return s\n", "refused: starting a process"),
    "refusal caught and ignored": (
        "try:\n    import refattn\nexcept Exception:\n    pass\n"
        "def softmax_vjp(s, u):\n    return s\n", "refused: importing refattn"),
    "monkeypatching os.stat first": (
        "import os\nos.stat = os.lstat = lambda *a, **k: None\n"
        "import refattn\nsoftmax_vjp = lambda s, u: refattn.activation('softmax').vjp(s, u)\n",
        "refused: importing refattn"),
    "disabling the guard": (
        "import builtins, gc\nbuiltins.len = lambda x: 0\n"
        "guard = next(f for f in gc.get_objects() if getattr(f, '__name__', '') == 'guard')\n"
        "guard.__code__ = (lambda event, args: None).__code__\n"
        "import refattn\nsoftmax_vjp = lambda s, u: refattn.activation('softmax').vjp(s, u)\n",
        "refused: replacing the guard's __code__"),
    "a second _posixsubprocess": (
        "import sys\ndel sys.modules['_posixsubprocess']\nimport _posixsubprocess\n"
        "def softmax_vjp(s, u):\n    return s\n", "refused: importing _posixsubprocess"),
    "an infinite loop": ("def softmax_vjp(s, u):\n    while True:\n        pass\n",
                         f"timed out after {LIMIT} s while running softmax_vjp"),
    "a crash (SIGSEGV)": ("import faulthandler\nfaulthandler.disable()\n"
                          "def softmax_vjp(s, u):\n    faulthandler._sigsegv()\n",
                          "killed by signal SIGSEGV while running softmax_vjp"),
}


def write(tmp_path, text, name="answer.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CHEATS))
def test_cheating_answer_is_wrong_with_one_line(name, tmp_path):
    """The Python guard's refusals, as a student meets them on their own machine (the grader not
    root); where the grader is root the operating system stops the same answers first
    (``tests/test_exercises_attacks.py``)."""
    text, why = CHEATS[name]
    verdict = grade("softmax-vjp", write(tmp_path, text), timeout=LIMIT, isolation="python").as_dict()
    json.dumps(verdict, allow_nan=False)  # strict JSON
    assert verdict["ok"] is False
    assert len(verdict["checks"]) == 1 and verdict["checks"][0]["ok"] is False
    message = verdict["checks"][0]["message"]
    assert why in message and "\n" not in message, message
    assert verdict["grader_error"] is None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["import refattn", "an infinite loop"])
def test_cheating_answer_through_the_command_line(name, tmp_path, capsys):
    text, _ = CHEATS[name]
    code = cli_main(["exercises", "check", "softmax-vjp", write(tmp_path, text), "--json", "--timeout", str(LIMIT)])
    captured = capsys.readouterr()
    verdict = json.loads(captured.out)  # strict JSON on stdout, nothing before or after it
    assert code == 1 and verdict["ok"] is False and len(verdict["checks"]) == 1, captured.out
    assert "grader error" not in captured.err


@pytest.mark.slow
def test_print_at_import_is_graded_on_its_merits(tmp_path, capsys):
    text = solution_source(exercise("softmax-vjp")).replace("import numpy as np\n",
                                                            "import numpy as np\nprint('hello from import')\n", 1)
    path = write(tmp_path, text)
    assert cli_main(["exercises", "check", "softmax-vjp", path, "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["ok"] is True and verdict["printed"] == {"import": "hello from import\n"}
    assert cli_main(["exercises", "check", "softmax-vjp", path]) == 0
    out = capsys.readouterr().out
    assert out.startswith("01-softmax-vjp: CORRECT") and "| hello from import" in out


@pytest.mark.slow
def test_monkeypatching_in_the_answer_cannot_fake_a_pass(tmp_path):
    """An all-zero answer that first rebinds NumPy's comparison helpers (as a patch of the
    grader would): the checking happens in another process, so it is still wrong."""
    text = """
        import numpy as np
        np.allclose = lambda *a, **k: True
        np.max = lambda *a, **k: 0.0
        def softmax_vjp(s, u):
            return np.zeros_like(s)
        """
    verdict = grade("softmax-vjp", write(tmp_path, text))
    # zeros are finite, so the required case of that one property passes; it scores nothing by itself
    assert not verdict.ok and all(c["required"] for c in verdict.cases if c["ok"])
    assert group_score(verdict, False, 1.0, {})[0] == 0.0


@pytest.mark.slow
def test_answers_after_a_hang_or_an_exit_still_run(tmp_path):
    """One child runs many answers; after one that hangs or exits, a new child runs the rest."""
    loop = write(tmp_path, CHEATS["an infinite loop"][0], "loop.py")
    gone = write(tmp_path, CHEATS["os._exit(0) in the function"][0], "gone.py")
    items = [("softmax-vjp", loop), ("tanhmax-derivatives", solution_path(exercise(2))),
             ("softmax-vjp", gone), ("closure-witness", solution_path(exercise(14)))]
    verdicts = grade_many(items, timeout=LIMIT)
    assert [v.ok for v in verdicts] == [False, True, False, True]
    assert "timed out" in verdicts[0].checks[0].message and "exit status 0" in verdicts[2].checks[0].message


@pytest.mark.slow
def test_a_library_error_is_a_grader_error_not_the_answers(tmp_path, capsys, monkeypatch):
    from refattn.exercises import graders

    def broken(*args, **kwargs):
        raise ValueError("cotangent: shape (9,) does not match the output's (3, 5)")

    monkeypatch.setattr(graders, "_autograd_vjp", broken)  # one public case's expected value
    path = str(solution_path(exercise(1)))
    assert cli_main(["exercises", "check", "softmax-vjp", path]) == 2
    captured = capsys.readouterr()
    assert "grader error (not your answer's fault)" in captured.err and len(captured.err.splitlines()) == 1
    assert "your code raised" not in captured.out and "FAIL" in captured.out
    monkeypatch.setattr(graders, "_rng", broken)  # while drawing the cases: nothing graded
    assert cli_main(["exercises", "check", "softmax-vjp", path]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "grader error" in captured.err and len(captured.err.splitlines()) == 1


@pytest.mark.slow
def test_a_hidden_grader_error_leaves_the_public_result_alone(tmp_path, monkeypatch):
    """A failure of the grader in a hidden case is reported in the hidden group only (and to the
    instructor): it never changes the public test, which a student sees."""
    from refattn.exercises import graders

    real = graders.activation_vjp

    def broken_when_hidden(act, s, u, mask=None):
        if np.shape(s) == (4, 1):  # softmax's hidden "rows of one entry"
            raise ValueError("a hidden input leaks here")
        return real(act, s, u, mask=mask)

    monkeypatch.setattr(graders, "activation_vjp", broken_when_hidden)
    verdict = grade("softmax-vjp", str(solution_path(exercise(1))), hidden=True, isolation="python")
    assert set(verdict.group_errors) == {"hidden"} and "leaks" not in verdict.group_errors["hidden"]
    assert verdict.group(False)[0] == verdict.group(False)[1]  # every public case passes
    assert all(c.ok for c in verdict.checks if not c.hidden)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds the child through /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_is_one_line_and_leaves_nothing_behind(sig, tmp_path):
    """Ctrl-C, SIGTERM and SIGHUP: one line, exit 128 + the signal, the answer's process killed and the
    grader's temporary folders removed."""
    private = tmp_path / "tmp"  # the grader's own temporary folder: other runs on the machine use theirs
    private.mkdir()
    path = write(tmp_path, CHEATS["an infinite loop"][0])
    proc = subprocess.Popen([sys.executable, "-m", "refattn.exercises", "check", "softmax-vjp", path, "--timeout", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=default_sigint, env={**os.environ, "TMPDIR": str(private)})

    def children():
        out = []
        for d in os.listdir("/proc"):
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == proc.pid:
                out.append(int(d))
        return out

    try:
        for _ in range(1200):  # the grader is running an answer once its child exists
            kids = children()
            if kids or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert kids, "the grader started no child"
        time.sleep(0.2)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig
    said = "interrupted" if sig == signal.SIGINT else f"stopped by {sig.name}"
    assert err.strip() == f"refattn exercises: {said}" and out == ""
    time.sleep(0.1)
    assert not list(private.iterdir())
    assert not [k for k in kids if os.path.exists(f"/proc/{k}") and "Z" not in open(f"/proc/{k}/stat").read()
                .rsplit(")", 1)[1].split()[0]]


# ------------------------------------------------------------------------------
# Single sources, starters and the student handout
# ------------------------------------------------------------------------------


def _solution_lines():
    """Every line of every solution block, long enough to be telling."""
    lines = set()
    for ex in EXERCISES:
        for block in solution_blocks(solution_source(ex)):
            lines |= {ln.strip() for ln in block.splitlines() if len(ln.strip()) >= 8}
    return lines


@pytest.mark.slow
def test_starter_keeps_signatures_and_drops_solutions():
    for ex in EXERCISES:
        source = solution_source(ex)
        text = starter(source, ex.solution)
        compile(text, ex.stem, "exec")
        assert "### BEGIN SOLUTION" not in text and "### END SOLUTION" not in text
        assert solution_blocks(source), ex.name
        for sig in ex.defines:
            if ex.kind == "function":
                assert f"def {sig.split('(')[0]}(" in text, (ex.name, sig)
        assert f"refattn exercises check {ex.name}" in text
    with pytest.raises(ValueError, match="without"):
        starter("x = 1\n### END SOLUTION\n")
    with pytest.raises(ValueError, match="without"):
        starter("def f():\n    ### BEGIN SOLUTION\n    return 1\n")


def test_student_export_has_statements_starters_and_no_solution(tmp_path, capsys):
    out = tmp_path / "handout"
    assert cli_main(["exercises", "export", "--student", str(out)]) == 0
    capsys.readouterr()
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(["README.md", "LICENSE", "check.py", "checker", "derivations"]
                           + [f"{ex.stem}{ext}" for ex in EXERCISES for ext in (".md", ".py")])
    # the checker: the judge, the runner, the child and the public cases; no library, no hidden case
    checker = sorted(p.relative_to(out / "checker").as_posix() for p in (out / "checker").rglob("*") if p.is_file())
    assert checker == sorted(["__init__.py", "__main__.py", "judge.py", "runner.py", "_child.py", "isolation.py",
                              "exercises.json"] + [f"cases/{ex.stem}.{e}" for ex in EXERCISES for e in ("json", "npz")])
    for path in out.rglob("*.py"):
        assert not re.search(r"^\s*(from|import) +(refattn|autograd)\b", path.read_text(), re.M), path
    texts = {p.relative_to(out).as_posix(): p.read_text(errors="replace") for p in out.rglob("*")
             if p.is_file() and p.suffix != ".npz"}
    assert not [(name, leaked(text)) for name, text in texts.items() if leaked(text)]
    assert not [(name, leaked_library(text)) for name, text in texts.items() if leaked_library(text)]
    readme = texts["README.md"]
    for ex in EXERCISES:
        assert f"[`{ex.stem}.py`]({ex.stem}.py)" in readme
        statement = texts[f"{ex.stem}.md"]
        assert statement == (ROOT / ex.statement).read_text().replace(
            ".venv/bin/refattn exercises check", ".venv/bin/python check.py") + f"\n\n---\n\n*{credit('text')}*\n"
        for cited in re.findall(r"derivations/\d\d-[a-z0-9-]+\.md", statement):  # every "Read:" resolves here
            assert (out / cited).is_file(), (ex.stem, cited)
    # every file a student reads carries the credit line; the licence its code needs is shipped whole
    assert texts["LICENSE"] == (ROOT / "LICENSE").read_text() and "MIT License" in texts["LICENSE"]
    for name, text in texts.items():
        if name.endswith((".md", ".py")):
            assert credit("code") in text or credit("text") in text or credit("text", "code") in text, name
    # exercise 14's answer is one number: the handout holds no case that gives it away
    answer = closure_shift()
    assert f"{answer:.6g}"[:6] not in texts["checker/cases/14-closure-witness.json"]
    with np.load(out / "checker" / "cases" / "14-closure-witness.npz") as z:
        assert not any(np.any(np.isclose(z[k], answer, rtol=1e-2)) for k in z.files)
    # a starter is a wrong answer that says what is missing, through the handout's own checker (a function's
    # and the number's here; as root each run sets up the operating system's layer: the slow tier runs all)
    for ex in (EXERCISES[0], EXERCISES[-1]):
        r = subprocess.run([sys.executable, "check.py", ex.name, f"{ex.stem}.py"], cwd=out, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 1 and ": WRONG" in r.stdout, (ex.name, r.stdout, r.stderr)
        assert "NotImplementedError" in r.stdout or ex.kind == "number", r.stdout


@pytest.mark.slow
def test_the_handout_checker_passes_the_model_solutions_and_agrees_with_the_grader(tmp_path, capsys):
    """The public cases shipped as data give the same verdicts as the library's grader: every model
    solution right (exercise 14: its form only), every plausible wrong answer wrong."""
    out = tmp_path / "handout"
    assert cli_main(["exercises", "export", "--student", str(out)]) == 0
    capsys.readouterr()
    for ex in EXERCISES:
        r = subprocess.run([sys.executable, "check.py", ex.name, str(solution_path(ex)), "--json"], cwd=out,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (ex.name, r.stdout[-2000:], r.stderr)
        wrong = tmp_path / f"wrong-{ex.stem}.py"
        wrong.write_text(textwrap.dedent(WRONG[ex.name][1]))
        r = subprocess.run([sys.executable, "check.py", ex.name, str(wrong)], cwd=out, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == (0 if ex.kind == "number" else 1), (ex.name, r.stdout[-2000:])
        r = subprocess.run([sys.executable, "check.py", ex.name, f"{ex.stem}.py"], cwd=out, capture_output=True,
                           text=True, timeout=120)  # the starter: wrong, saying what is missing
        assert r.returncode == 1 and ": WRONG" in r.stdout, (ex.name, r.stdout, r.stderr)
        assert "NotImplementedError" in r.stdout or ex.kind == "number", r.stdout


# ------------------------------------------------------------------------------
# The Gradescope autograder
# ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def autograder(tmp_path_factory):
    """The exported zip, unpacked as Gradescope unpacks it into <root>/source."""
    d = tmp_path_factory.mktemp("gradescope")
    zpath = d / "autograder.zip"
    assert cli_main(["exercises", "export", "--gradescope", str(zpath), "--timeout", "20"]) == 0
    with zipfile.ZipFile(zpath) as z:
        names = set(z.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in z.infolist()}
        source = d / "template" / "source"
        z.extractall(source)
    for name in ("setup.sh", "run_autograder"):
        os.chmod(source / name, modes[name])
    return d, names, modes


def _run_autograder(base, template, answers, name):
    """Lay out <root>/{source,submission,results} and run run_autograder with this Python."""
    root = base / name
    shutil.copytree(template / "source", root / "source", symlinks=True)
    (root / "submission").mkdir(parents=True)
    (root / "results").mkdir()
    for fname, text in answers.items():
        (root / "submission" / fname).write_text(text)
    env = {**os.environ, "REFATTN_AUTOGRADER_ROOT": str(root), "REFATTN_AUTOGRADER_PYTHON": sys.executable}
    proc = subprocess.run([str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert str(root / "source") in proc.stdout  # graded by the zip's own copy of the package
    return json.loads((root / "results" / "results.json").read_text())


def _valid(results):
    assert isinstance(results["tests"], list) and results["tests"]
    for t in results["tests"]:
        assert {"name", "score", "max_score", "output", "visibility"} <= set(t)
        assert t["visibility"] in ("visible", "hidden", "after_due_date", "after_published")
        assert 0 <= t["score"] <= t["max_score"] and isinstance(t["output"], str)
    names = [t["name"] for t in results["tests"]]
    assert len(names) == len(set(names))
    for ex in EXERCISES:
        assert f"{ex.number:02d} {ex.name}: public cases" in names
        assert (f"{ex.number:02d} {ex.name}: hidden cases" in names) == (ex.kind != "number")
    assert sum(t["max_score"] for t in results["tests"]) == sum(ex.points for ex in EXERCISES)


@pytest.mark.slow
def test_the_zip_carries_what_it_needs(autograder):
    _, names, modes = autograder
    assert {"setup.sh", "run_autograder", "requirements.txt", CONFIG_NAME, "LICENSE", "refattn/__init__.py",
            "refattn/exercises/_child.py"} <= names
    assert not any("solutions" in n or n.startswith("instructor") for n in names), "the zip holds no solutions"
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    assert not any("__pycache__" in n for n in names)


@pytest.mark.slow
def test_gradescope_full_marks_for_the_solutions(autograder):
    base, _, _ = autograder
    config = json.loads((base / "template" / "source" / CONFIG_NAME).read_text())
    assert config["timeout_s"] == 20 and config["hidden_seed"] is None and len(config["secret"]) == 64
    answers = {f"{ex.stem}.py": solution_source(ex) for ex in EXERCISES}
    results = _run_autograder(base, base / "template", answers, "solutions")
    _valid(results)
    assert results["score"] == sum(ex.points for ex in EXERCISES)
    assert all(t["score"] == t["max_score"] for t in results["tests"]), results
    assert results["output"].endswith(credit("code"))  # the autograder's output carries the credit line


@pytest.mark.slow
def test_gradescope_partial_marks_for_wrong_answers(autograder, tmp_path):
    base, _, _ = autograder
    answers = {f"{ex.stem}.py": solution_source(ex) for ex in EXERCISES}
    for name in ("softmax-vjp", "no-normaliser", "closure-witness"):
        answers[f"{exercise(name).stem}.py"] = textwrap.dedent(WRONG[name][1])
    answers["06_signexp_at_zero.py"] = answers.pop("06-signexp-at-zero.py")  # another accepted name
    del answers["13-central-difference-step.py"]
    answers["02-tanhmax-derivatives.py"] = "import refattn\n" + answers["02-tanhmax-derivatives.py"]
    results = _run_autograder(base, base / "template", answers, "wrong")
    _valid(results)
    by_name = {t["name"]: t for t in results["tests"]}
    total = sum(ex.points for ex in EXERCISES)
    assert 0 < results["score"] < total
    for title in ("01 softmax-vjp", "12 no-normaliser", "02 tanhmax-derivatives"):
        public = by_name[f"{title}: public cases"]
        assert public["score"] < public["max_score"], public
    assert by_name["14 closure-witness: public cases"]["score"] == 0
    assert by_name["13 central-difference-step: public cases"]["score"] == 0
    assert "no file 13-central-difference-step.py" in by_name["13 central-difference-step: public cases"]["output"]
    assert "refused: importing refattn" in by_name["02 tanhmax-derivatives: public cases"]["output"]
    assert by_name["06 signexp-at-zero: hidden cases"]["score"] == by_name["06 signexp-at-zero: hidden cases"]["max_score"]
    # a hidden test says kinds, not inputs; a wrong public one says where
    assert "at index" in by_name["01 softmax-vjp: public cases"]["output"]
    assert "at index" not in by_name["12 no-normaliser: hidden cases"]["output"]
    assert by_name["12 no-normaliser: hidden cases"]["visibility"] == "after_published"


@pytest.mark.slow
def test_export_refuses_bad_input(tmp_path, capsys):
    assert cli_main(["exercises", "export"]) == 2
    assert cli_main(["exercises", "export", "--gradescope", str(tmp_path / "x.tar")]) == 2
    assert cli_main(["exercises", "export", "--gradescope", str(tmp_path / "x.zip"),
                     "--hidden-visibility", "sometimes"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "export" in err[0] and "--gradescope" in err[1] and "--hidden-visibility" in err[2]
    assert not (tmp_path / "x.zip").exists()
    export_gradescope(tmp_path / "y.zip", hidden_seed=5)
    with zipfile.ZipFile(tmp_path / "y.zip") as z:
        assert json.loads(z.read(CONFIG_NAME))["hidden_seed"] == 5


@pytest.mark.slow
def test_the_hint_names_u_dot_p_in_place_of_u_dot_phi(tmp_path):
    """Exercise 3's common mistake (the one its statement warns about) is named by the grader."""
    text = """
        import numpy as np
        def reweighted_vjp(p, rho, drho, dell, u):
            pl = p * dell
            return u * (drho * p + rho * pl) - pl * np.sum(u * p, axis=-1, keepdims=True)
        """
    verdict = grade("reweighted-vjp", write(tmp_path, text))
    assert not verdict.ok
    assert any("<u, p> in place of <u, phi>" in h for h in verdict.hints), verdict.hints


@pytest.mark.slow
def test_an_overflow_is_not_blamed_on_the_reduction_axis(tmp_path):
    """softmax's VJP without the max shift overflows on the rows near 800: the hint says so, and
    the 'right in 1-D, wrong for more axes' hint does not fire although the 1-D row passes."""
    text = """
        import numpy as np
        def softmax_vjp(s, u):
            e = np.exp(s)
            p = e / e.sum(axis=-1, keepdims=True)
            return p * (u - np.sum(u * p, axis=-1, keepdims=True))
        """
    verdict = grade("softmax-vjp", write(tmp_path, text))
    assert not verdict.ok
    assert any(h.startswith("NaN or inf") for h in verdict.hints), verdict.hints
    assert not any("more axes" in h for h in verdict.hints), verdict.hints


@pytest.mark.slow
def test_the_axis_hint_still_fires_for_a_global_sum(tmp_path):
    text = """
        import numpy as np
        def softmax_vjp(s, u):
            e = np.exp(s - np.max(s, axis=-1, keepdims=True))
            p = e / e.sum(axis=-1, keepdims=True)
            return p * (u - np.sum(u * p))
        """
    verdict = grade("softmax-vjp", write(tmp_path, text))
    assert not verdict.ok and any("more axes" in h for h in verdict.hints), verdict.hints


# ------------------------------------------------------------------------------
# Hidden inputs stay hidden
# ------------------------------------------------------------------------------

LEAK_SEED = 914725368  # a seed whose digits cannot occur by chance in a feedback line

#: An answer to exercise 01 that does its best to show the grader's inputs: it lists its
#: process's folder at import (where the inputs were written), prints every input to stdout
#: and stderr through Python and through the file descriptors, raises with the inputs in the
#: message where the hidden cases' shapes differ from the public ones, and is off by a factor 2
#: everywhere else; the second one ends the process with the inputs as its exit message.
LEAKY = """
import os, sys
import numpy as np
try:
    print("folder:", sorted(os.listdir("..")))
except Exception as exc:
    print("folder: not listed,", type(exc).__name__)

def _show(s, u):
    return " ".join(f"{x:.10g}" for x in np.concatenate([np.ravel(s), np.ravel(u)]))

def softmax_vjp(s, u):
    text = _show(s, u)
    print(text)
    sys.stderr.write(text + "\\n")
    os.write(1, (text + "\\n").encode())
    os.write(2, (text + "\\n").encode())
    if s.ndim == 4 or s.shape[-1] == 1 or s.shape[-1] == 7:
        raise ValueError(text)
    e = np.exp(s - np.max(s, axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return 2.0 * p * (u - np.sum(u * p, axis=-1, keepdims=True))
"""
LEAKY_EXIT = LEAKY.replace("        raise ValueError(text)", "        sys.exit(text)")


def _needles(arrays):
    """How a value of ``arrays`` could be written: 10 and 6 significant digits, 6 decimals."""
    out = set()
    for a in arrays:
        for x in np.ravel(a):
            if abs(x) > 1e-3 and x != round(x):
                out |= {f"{x:.10g}", f"{x:.6g}", f"{x:.6f}"}
    return out


def _inputs(hidden, public_seed=None):
    cases = [c for c in exercise(1).cases(LEAK_SEED, public_seed) if c.hidden == hidden]
    # an input the answer's process draws (a long row): its first entries, as it would print them
    return [a.array()[:100] if isinstance(a, Drawn) else np.asarray(a) for c in cases for call in c.calls
            for a in call.args]


@pytest.mark.slow
@pytest.mark.parametrize("text", [LEAKY, LEAKY_EXIT], ids=["prints-and-raises", "exits"])
def test_no_visible_output_holds_a_hidden_input(text, tmp_path, capsys):
    """Every output a student can see of a failing hidden case (the autograder's tests, public and
    hidden, its summary; ``check --hidden`` as text and as JSON) is searched for every hidden
    input's value and for the hidden seed. The same search finds the public inputs in what the
    answer printed in the public run, so it would find hidden ones were they shown."""
    from refattn.exercises.gradescope import results_for

    ex = exercise(1)
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / f"{ex.stem}.py").write_text(text)
    config = {"hidden_seed": LEAK_SEED, "timeout_s": LIMIT, "hidden_visibility": "visible", "secret": "0" * 64,
              "exercises": [{"stem": ex.stem, "points": 2}]}  # the secret draws the visible cases, as an export's
    results = results_for(tmp_path, config)
    hidden_test = next(t for t in results["tests"] if t["name"].endswith("hidden cases"))
    public_test = next(t for t in results["tests"] if t["name"].endswith("public cases"))
    assert hidden_test["score"] < hidden_test["max_score"] and public_test["score"] < public_test["max_score"]
    path = str(tmp_path / "submission" / f"{ex.stem}.py")
    seen = [json.dumps(results)]
    for extra in (["--json"], []):
        code = cli_main(["exercises", "check", ex.name, path, "--hidden", "--hidden-seed", str(LEAK_SEED),
                         "--timeout", str(LIMIT)] + extra)
        assert code == 1
        captured = capsys.readouterr()
        seen += [captured.out, captured.err]
    visible = "\n".join(seen).replace("\\n", "\n")
    found = sorted(n for n in _needles(_inputs(True)) if n in visible)
    assert not found, found[:5]
    assert str(LEAK_SEED) not in visible
    assert "input.npz" not in visible and "input.json" not in visible  # the child's inputs are gone from disk
    # the search works: the public inputs the answer printed are there (the autograder draws its visible
    # cases from the submission's own seed, whatever the fixed hidden one)
    from refattn.exercises.gradescope import submission_seed

    drawn = _inputs(False, submission_seed(config["secret"], [path]))
    assert len([n for n in _needles(drawn) if n in public_test["output"]]) >= 6


# ------------------------------------------------------------------------------
# run_autograder always writes results.json; setup.sh installs into a virtual environment
# ------------------------------------------------------------------------------


def _layout(base, template, name, answers=None):
    root = base / name
    shutil.copytree(template / "source", root / "source", symlinks=True)
    if answers is not None:
        (root / "submission").mkdir(parents=True)
        for fname, text in answers.items():
            (root / "submission" / fname).write_text(text)
    return root


def _results_after(root, python):
    env = {**os.environ, "REFATTN_AUTOGRADER_ROOT": str(root), "REFATTN_AUTOGRADER_PYTHON": python}
    proc = subprocess.run([str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((root / "results" / "results.json").read_text())  # strict JSON, always there
    assert isinstance(results["score"], (int, float)) and isinstance(results["output"], str) and results["output"]
    assert isinstance(results["tests"], list)
    return results


@pytest.mark.slow
def test_results_written_when_setup_failed(autograder, tmp_path):
    """No Python at the configured path, or one without the dependencies (what a failed setup.sh
    leaves): run_autograder still writes a results file with a score of 0 and says why."""
    base, _, _ = autograder
    bare = tmp_path / "python-without-numpy"
    bare.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'numpy'\" >&2\nexit 1\n")
    bare.chmod(0o755)
    for k, python in enumerate([str(tmp_path / "no-such-python"), str(bare)]):
        root = _layout(base, base / "template", f"setup-failed-{k}", {"01-softmax-vjp.py": "x = 1\n"})
        results = _results_after(root, python)
        assert results["score"] == 0 and "could not start" in results["output"], results


@pytest.mark.slow
def test_results_written_when_the_submission_is_missing(autograder):
    base, _, _ = autograder
    root = _layout(base, base / "template", "no-submission")  # no submission folder at all
    results = _results_after(root, sys.executable)
    assert results["score"] == 0 and "No answer file was found" in results["output"]
    assert results["tests"] and all(t["score"] == 0 and "no file" in t["output"] for t in results["tests"]
                                    if not t["name"].startswith("instructor"))


@pytest.mark.slow
def test_results_written_when_a_grader_crashes(autograder, monkeypatch):
    """A crash of the grader itself (here: drawing the cases, in process) and a broken settings file
    (the real script) each give a results file with a score of 0 and the failure named."""
    from refattn.exercises import gradescope, grading

    base, _, _ = autograder
    root = _layout(base, base / "template", "grader-crash", {"01-softmax-vjp.py": solution_source(exercise(1))})

    def crash(*args, **kwargs):
        raise RuntimeError("the grader fell over")

    monkeypatch.setattr(grading, "grade_many", crash)
    assert gradescope.main(["--root", str(root)]) == 1
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 0 and "RuntimeError: the grader fell over" in results["output"]
    monkeypatch.undo()
    root = _layout(base, base / "template", "broken-config", {"01-softmax-vjp.py": solution_source(exercise(1))})
    (root / "source" / CONFIG_NAME).write_text("{not json")
    results = _results_after(root, sys.executable)
    assert results["score"] == 0 and "JSONDecodeError" in results["output"]


@pytest.mark.slow
def test_setup_installs_into_a_virtual_environment(autograder, tmp_path):
    """setup.sh on a PEP 668 image: it makes a virtual environment and installs with that
    environment's pip, never the system's. Run with stand-ins for python3 and apt-get that log
    their arguments (nothing is installed)."""
    base, _, _ = autograder
    source = base / "template" / "source"
    bindir, log, venv = tmp_path / "bin", tmp_path / "log", tmp_path / "venv"
    bindir.mkdir()
    fake_python = ("#!/bin/sh\necho \"$0 $*\" >> " + str(log) + "\n"
                   "if [ \"$1\" = -m ] && [ \"$2\" = pip ] && [ \"$0\" != " + str(venv / "bin" / "python") + " ]; then\n"
                   "  echo 'error: externally-managed-environment' >&2; exit 1\nfi\n"
                   "if [ \"$1\" = -m ] && [ \"$2\" = venv ]; then\n  mkdir -p \"$3/bin\"\n"
                   "  cp \"$0\" \"$3/bin/python\"\nfi\n")
    (bindir / "python3").write_text(fake_python)
    (bindir / "apt-get").write_text("#!/bin/sh\necho \"apt-get $*\" >> " + str(log) + "\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:/usr/bin:/bin", "REFATTN_AUTOGRADER_VENV": str(venv)}
    proc = subprocess.run(["bash", str(source / "setup.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = log.read_text().splitlines()
    assert lines[0] == f"{bindir / 'python3'} -m venv {venv}", lines
    assert f"{venv / 'bin' / 'python'} -m pip install -r requirements.txt" in lines, lines
    assert not any(ln.startswith(str(bindir / "python3")) and " pip " in ln for ln in lines), lines


# ------------------------------------------------------------------------------
# A subset, points, the handout's check command, trying the zip here
# ------------------------------------------------------------------------------


@pytest.mark.slow
def test_export_a_subset_with_points(tmp_path, capsys):
    zpath, handout = tmp_path / "sub.zip", tmp_path / "handout"
    assert cli_main(["exercises", "export", "--gradescope", str(zpath), "--student", str(handout),
                     "--exercises", "03,1,closure-witness", "--points", "01=5,14=1.5"]) == 0
    capsys.readouterr()
    with zipfile.ZipFile(zpath) as z:
        config = json.loads(z.read(CONFIG_NAME))
    assert config["exercises"] == [{"stem": "01-softmax-vjp", "points": 5.0},
                                   {"stem": "03-reweighted-vjp", "points": float(exercise(3).points)},
                                   {"stem": "14-closure-witness", "points": 1.5}]
    assert sorted(p.name for p in handout.iterdir()) == sorted(
        ["README.md", "LICENSE", "check.py", "checker", "derivations"]
        + [f"{exercise(n).stem}{ext}" for n in (1, 3, 14) for ext in (".md", ".py")])
    assert sorted(p.name for p in (handout / "checker" / "cases").iterdir()) == sorted(
        f"{exercise(n).stem}.{e}" for n in (1, 3, 14) for e in ("json", "npz"))
    readme = (handout / "README.md").read_text()
    assert "02-tanhmax-derivatives" not in readme and "14-closure-witness.py" in readme
    assert cli_main(["exercises", "export", "--gradescope", str(tmp_path / "all.zip"), "--points", "3"]) == 0
    with zipfile.ZipFile(tmp_path / "all.zip") as z:
        assert {e["points"] for e in json.loads(z.read(CONFIG_NAME))["exercises"]} == {3.0}


@pytest.mark.slow
@pytest.mark.parametrize("args, option", [
    (["--exercises", "01,99"], "--exercises"), (["--exercises", "01,,03"], "--exercises"),
    (["--exercises", "1,01"], "--exercises"), (["--exercises", ""], "--exercises"),
    (["--points", "0"], "--points"), (["--points", "two"], "--points"), (["--points", "01=-1"], "--points"),
    (["--exercises", "1", "--points", "02=3"], "--points"), (["--points", "nope=3"], "--points")])
def test_export_refuses_bad_subsets_and_points(args, option, tmp_path, capsys):
    zpath = tmp_path / "x.zip"
    assert cli_main(["exercises", "export", "--gradescope", str(zpath)] + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and option in err[0], err
    assert not zpath.exists()


def _bash(command, cwd):
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8"}
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_handout_readme_check_commands_run_as_written(tmp_path, capsys):
    """The handout's README gives the set-up (a virtual environment .venv with NumPy) and the command
    that checks each answer, run in the handout's folder: each runs as written, on a starter (wrong:
    exit 1) and on a model solution (right: exit 0)."""
    handout = tmp_path / "handout"
    assert cli_main(["exercises", "export", "--student", str(handout)]) == 0
    capsys.readouterr()
    readme = (handout / "README.md").read_text()
    assert "    python3 -m venv .venv\n    .venv/bin/pip install numpy\n" in readme
    assert "What to submit" in readme and "hidden cases" in readme
    assert not list(handout.rglob("instructor")) and not list(handout.rglob("refattn"))
    commands = sorted(set(re.findall(r"\.venv/bin/python check\.py \S+ \S+\.py", readme)))
    assert len(commands) == len(EXERCISES)
    (handout / ".venv").symlink_to(sys.prefix, target_is_directory=True)  # what the set-up makes
    for command in commands:
        r = _bash(command, handout)
        # nothing on stderr but, started as root, the one line that says the answer runs as another user
        err = [line for line in r.stderr.splitlines() if not line.startswith("check: started as root: ")]
        assert r.returncode == 1 and ": WRONG" in r.stdout and not err, (command, r.stdout, r.stderr)
    (handout / "01-softmax-vjp.py").write_text(solution_source(exercise(1)))
    r = _bash(next(c for c in commands if " softmax-vjp " in c), handout)
    assert r.returncode == 0 and r.stdout.startswith("01-softmax-vjp: CORRECT"), r.stdout
    r = _bash(".venv/bin/python check.py", handout)
    assert r.returncode == 0 and "softmax-vjp" in r.stdout


@pytest.mark.slow
def test_try_gradescope_as_the_teaching_page_says(clone_root):
    """docs/teach.md's command that tries the zip in a Gradescope-like layout runs as written and
    gives the model solutions full marks; on the handout's starters it gives none."""
    lines = [ln.strip() for ln in (ROOT / "docs" / "teach.md").read_text().splitlines()
             if "exercises try-gradescope" in ln and ln.strip().startswith(".venv/bin/")]
    assert lines, "docs/teach.md shows no try-gradescope command"
    tmp_path = clone_root  # run in a clone's root, as the page says
    r = _bash(lines[0].split(" # ")[0], tmp_path)
    assert r.returncode == 0, r.stderr
    total = sum(ex.points for ex in EXERCISES)
    assert f"total: {total:g} of {total:g} points" in r.stdout, r.stdout
    assert _bash(".venv/bin/refattn exercises export --student handout", tmp_path).returncode == 0
    r = _bash(".venv/bin/refattn exercises try-gradescope trial.zip --submission handout --json", tmp_path)
    assert r.returncode == 0, r.stderr
    results = json.loads(r.stdout)
    assert results["score"] == 0 and len(results["tests"]) > len(EXERCISES)


@pytest.mark.slow
@pytest.mark.parametrize("page", ["docs/teach.md", "exercises/README.md"])
def test_teaching_pages_render_their_lists(page):
    """Rendered as the book renders it (Python-Markdown with the book's extensions), no list item
    or code fence of the page is left as literal text: a list needs a blank line before it, and a
    block inside an item four spaces of indentation."""
    markdown = pytest.importorskip("markdown")
    html = markdown.markdown((ROOT / page).read_text(), extensions=[
        "admonition", "attr_list", "md_in_html", "tables", "footnotes", "pymdownx.highlight", "pymdownx.superfences"])
    text = re.sub(r"<pre.*?</pre>", "", html, flags=re.S)
    assert not re.search(r"^\s*[*+-] \S", text, re.M), re.findall(r"^\s*[*+-] .*", text, re.M)[:3]
    assert "```" not in html
    assert html.count("<li>") == len(re.findall(r"^\s*(?:[*+-]|\d+\.) ", re.sub(r"```.*?```", "", (ROOT / page)
                                                                                  .read_text(), flags=re.S), re.M))


@pytest.mark.slow
def test_without_the_model_solutions_the_export_says_what_to_do(tmp_path, monkeypatch, capsys):
    """An installed wheel has no model solutions (they are in a clone's instructor/solutions/):
    the handout, made from them, is refused in one line that says to run in a clone."""
    from refattn.exercises import export, paths

    monkeypatch.setattr(paths, "PACKAGE", tmp_path / "site" / "refattn")
    monkeypatch.chdir(tmp_path)
    assert export.solutions_dir() is None
    assert cli_main(["exercises", "export", "--student", str(tmp_path / "handout")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--student" in err[0] and "clone" in err[0], err
    assert not (tmp_path / "handout").exists()
    with pytest.raises(ValueError, match="clone"):
        export.solution_source(exercise(1))
