"""Attacks on the graders by a student who wants the points, and the layer that stops each.

The threat: a student who reads all of refattn's code and has root on their own
machine. The Python guard of the answer's process is a convenience; the
boundary is the operating system's, where the grader runs as root (Gradescope,
and ``check``/``try-gradescope`` started as root): the answer runs as another
user, alone in a folder tree of its own, under limits
(``refattn/exercises/isolation.py``). The tests marked ``root`` check that
boundary with the Python guard switched off, as an answer that wrote the
interpreter's memory would meet it; they are skipped, with the reason, where
the tests do not run as root. The others run everywhere.

Each attack must score no more than the answer's honest worth, leave no
process behind and write nothing outside the grader's own folders.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from tests.support import wait_for

import refattn
from refattn.cli import main as cli_main
from refattn.exercises import exercise, grade, grade_many, isolation
from refattn.exercises.export import solution_path, solution_source
from refattn.exercises.gradescope import submission_seed
from refattn.exercises.graders import LONG_ROW

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PKG = os.path.dirname(refattn.__file__)
LIMIT = 8
AS_ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not AS_ROOT, reason="the operating system's boundary needs the grader to run as root "
                                                   "(as Gradescope runs it); here the tests are not root")


def write(folder, text, name="answer.py"):
    path = Path(folder) / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def answer_processes():
    """The PIDs of every process of the answer user that is still alive."""
    ids = isolation.answer_user(create=False)
    if ids is None:
        return []
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == ids[0]:
                    out.append(int(entry))
            except OSError:
                pass
    return out


SOLUTION_01 = solution_source(exercise(1))

#: Everything an answer could try once the Python guard is off, each reported by name and outcome
#: (``MARK`` and ``FILES`` are filled in by :func:`probe`).
PROBE = """
import os, socket, sys

def _tries():
    out = {}
    def attempt(name, f):
        try:
            f()
            out[name] = "done"
        except BaseException as exc:
            out[name] = type(exc).__name__
    attempt("import refattn", lambda: __import__("refattn"))
    attempt("import autograd", lambda: __import__("autograd"))
    for i, p in enumerate(FILES):
        attempt("read %d" % i, lambda p=p: open(p, "rb").read(64))
    attempt("read the grader's memory", lambda: open("/proc/%d/mem" % os.getppid(), "rb").read(1))
    attempt("fork", lambda: os.fork() or None)
    attempt("write here", lambda: open("x.txt", "w").write("x"))
    attempt("write /tmp", lambda: open("/tmp/" + MARK, "w").write("x"))
    attempt("mkdir /tmp", lambda: os.mkdir("/tmp/" + MARK + "-dir"))
    attempt("signal the grader", lambda: os.kill(os.getppid(), 0))
    attempt("network", lambda: socket.create_connection(("127.0.0.1", 22), timeout=1))
    attempt("3 GiB", lambda: bytearray(3 * 2 ** 30))
    return out

import json
print(json.dumps(_tries()))

def softmax_vjp(s, u):
    return s
"""


def probe(marker):
    files = [os.path.join(os.path.dirname(PKG), "instructor", "solutions", "01-softmax-vjp.py"),
             os.path.join(PKG, "core", "activations.py"), "/etc/hostname"]
    return f"MARK = {marker!r}\nFILES = {files!r}\n" + PROBE


def _tries(verdict):
    return json.loads(verdict.printed["import"].strip().splitlines()[-1])


@root_only
@pytest.mark.parametrize("chroot, netns", [(True, True), (False, True), (True, False)],
                         ids=["jail", "no-chroot", "no-network-namespace"])
def test_the_os_boundary_holds_with_the_guard_switched_off(chroot, netns, tmp_path, monkeypatch):
    """Without a network namespace (an ordinary container), seccomp refuses every socket."""
    marker = f"refattn-attack-{os.getpid()}-{chroot}-{netns}"
    real = isolation.prepare
    monkeypatch.setattr(isolation, "prepare", lambda *a, **k: real(*a, **{**k, "chroot": chroot}))
    if not netns:
        monkeypatch.setattr(isolation, "_network_namespace_works", lambda: False)
    seen = {}
    verdict = grade_many([("softmax-vjp", write(tmp_path, probe(marker)))], timeout=LIMIT,
                         python_guard=False, describe=seen.update)[0]
    assert seen["level"] == "operating system" and seen["chroot"] is chroot
    tries = _tries(verdict)
    assert not verdict.ok
    allowed = set()
    assert seen["network"] != "not isolated", seen  # a namespace, or seccomp where there is none
    if not netns:
        assert seen["network"] == "none (sockets refused by seccomp)"
    if not chroot:  # without a jail: files every user may read stay readable, and /tmp takes empty entries
        allowed |= {"read 0", "read 1", "read 2", "write /tmp", "mkdir /tmp"}
    done = {name for name, outcome in tries.items() if outcome == "done"}
    assert done <= allowed, tries
    assert tries["fork"] in ("BlockingIOError", "PermissionError") and tries["3 GiB"] == "MemoryError"
    assert tries["signal the grader"] == "PermissionError" and tries["read the grader's memory"] != "done"
    assert not list(Path("/tmp").glob(marker + "*"))  # nothing left: removed with the answer user's processes
    assert answer_processes() == []


@root_only
def test_the_grader_files_are_out_of_reach_without_a_jail(tmp_path, monkeypatch):
    """Without chroot, an autograder's own folders are root's alone: the answer reads none of them."""
    real = isolation.prepare
    monkeypatch.setattr(isolation, "prepare", lambda *a, **k: real(*a, **{**k, "chroot": False}))
    secret = tmp_path / "source"
    secret.mkdir()
    (secret / "settings.json").write_text('{"secret": 1}')
    os.chmod(secret, 0o700)
    text = f"def softmax_vjp(s, u):\n    return open({str(secret / 'settings.json')!r}).read()\n"
    verdict = grade_many([("softmax-vjp", write(tmp_path, text))], timeout=LIMIT, python_guard=False)[0]
    assert not verdict.ok and "PermissionError" in str(verdict)


def test_the_guard_refuses_the_memory_files(tmp_path):
    """The first step of switching the guard off was reading /proc/self/mem: the guard refuses it
    (a convenience: NumPy can still stride over memory, which the operating system's boundary answers)."""
    text = "open('/proc/self/mem', 'rb')\ndef softmax_vjp(s, u):\n    return s\n"
    verdict = grade("softmax-vjp", write(tmp_path, text), timeout=LIMIT, isolation="python")
    assert not verdict.ok and "a process's memory" in str(verdict)


def test_expected_values_are_computed_only_after_the_answers_process_has_ended(tmp_path, monkeypatch):
    from refattn.exercises import judge, runner

    alive = {"n": 0, "max_seen_during_expectations": 0, "calls": 0}
    real_run, real_expect = runner._run_child, judge.expectations

    def run(*args, **kwargs):
        alive["n"] += 1
        try:
            return real_run(*args, **kwargs)
        finally:
            alive["n"] -= 1

    def expect(case):
        alive["calls"] += 1
        alive["max_seen_during_expectations"] = max(alive["max_seen_during_expectations"], alive["n"])
        return real_expect(case)

    monkeypatch.setattr(runner, "_run_child", run)
    monkeypatch.setattr(judge, "expectations", expect)
    verdict = grade("softmax-vjp", str(solution_path(exercise(1))), hidden=True, isolation="python")
    assert verdict.ok and alive["calls"] > 0 and alive["max_seen_during_expectations"] == 0


def test_the_submission_folder_is_not_importable(tmp_path):
    """The library copied into the submission under another name: the answer runs from a fresh folder
    holding a copy of its own file alone, so the copy is not found."""
    sub = tmp_path / "submission"
    shutil.copytree(PKG, sub / "myref", ignore=shutil.ignore_patterns("__pycache__"))
    text = ("import myref\n"
            "def softmax_vjp(s, u):\n"
            "    a = myref.activation('softmax')\n"
            "    return a.backward(u, a.forward(s)[1])\n")
    verdict = grade("softmax-vjp", write(sub, text, "01-softmax-vjp.py"), timeout=LIMIT)
    assert not verdict.ok and "No module named 'myref'" in str(verdict)


@pytest.fixture(scope="module")
def autograder(tmp_path_factory):
    d = tmp_path_factory.mktemp("attacks")
    zpath = d / "autograder.zip"
    assert cli_main(["exercises", "export", "--gradescope", str(zpath), "--exercises", "01,05,06",
                     "--timeout", str(LIMIT)]) == 0
    return zpath


def _try(zpath, submission, keep):
    r = subprocess.run([sys.executable, "-m", "refattn", "exercises", "try-gradescope", str(zpath), "--submission",
                        str(submission), "--keep", str(keep), "--json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _score(results, stem):
    return sum(t["score"] for t in results["tests"] if t["name"].startswith(stem))


def test_a_link_to_a_model_solution_is_refused(autograder, tmp_path):
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "01-softmax-vjp.py").symlink_to(solution_path(exercise(1)))
    results = _try(autograder, sub, tmp_path / "root")
    assert _score(results, "01 ") == 0
    public = next(t for t in results["tests"] if t["name"] == "01 softmax-vjp: public cases")
    assert "a link to a file outside your submission" in public["output"]


def test_the_model_solutions_keep_full_marks_with_harmless_imports(autograder, tmp_path):
    """A read-only import of the standard library or of NumPy's submodules passes the rule."""
    sub = tmp_path / "submission"
    sub.mkdir()
    extra = ("import numpy.testing, numpy.linalg, numpy.fft, numpy.random, functools, itertools, math, "
             "collections, dataclasses, typing, decimal, fractions, statistics, warnings, re, json\n")
    for n in (1, 5, 6):
        ex = exercise(n)
        (sub / f"{ex.stem}.py").write_text(extra + solution_source(ex))
    results = _try(autograder, sub, tmp_path / "root")
    assert results["score"] == sum(exercise(n).points for n in (1, 5, 6)), json.dumps(results)[:2000]
    assert answer_processes() == []


ATTACKS = {
    # exercise 05: zero at the all-ones cotangent, the cotangent itself elsewhere: no VJP at all
    "05-all-ones-cotangent.py": """
        import numpy as np
        def wrong_vjp(s, u):
            return np.zeros_like(u) if np.all(u == 1) else u
        """,
    # exercise 06: the measured central difference instead of the first-order prediction
    "06-signexp-at-zero.py": """
        import numpy as np
        def _F(s, u):
            e = np.exp(np.abs(s))
            return float(u @ (np.sign(s) * e) / e.sum())
        def jump(s, u, j):
            return 0.0
        def slopes(s, u, j):
            return (0.0, 0.0)
        def central_at_zero(s, u, j, eps):
            sp, sm = s.copy(), s.copy()
            sp[j], sm[j] = eps, -eps
            return (_F(sp, u) - _F(sm, u)) / (2 * eps)
        """,
    # exercise 01: a report nested 100,000 deep written straight to every descriptor, then an exit
    "01-softmax-vjp.py": """
        import os, struct
        def softmax_vjp(s, u):
            payload = b"J" + b"[" * 100000 + b"]" * 100000
            frame = struct.pack(">I", len(payload)) + payload
            for fd in range(3, 40):
                try:
                    os.write(fd, frame)
                except OSError:
                    pass
            return s
        """,
}


def test_attacks_score_nothing(autograder, tmp_path):
    sub = tmp_path / "submission"
    sub.mkdir()
    for name, text in ATTACKS.items():
        (sub / name).write_text(textwrap.dedent(text))
    results = _try(autograder, sub, tmp_path / "root")
    assert results["score"] == 0, json.dumps(results)[:3000]
    assert all("grader error" not in t["output"] for t in results["tests"])
    outputs = {t["name"]: t["output"] for t in results["tests"]}
    assert "first-order prediction" in outputs["06 signexp-at-zero: public cases"]
    assert "not of the form a(s) (x - <x, p>)" in outputs["05 all-ones-cotangent: public cases"]
    assert answer_processes() == []


def test_hidden_feedback_names_no_input(tmp_path):
    """An exception class and message made of the inputs, and a value NumPy cannot read, in the hidden
    cases: the hidden feedback names neither, and the public result is the answer's honest one."""
    text = textwrap.dedent("""
        import numpy as np
        def softmax_vjp(s, u):
            if s.shape in ((6,), (3, 5), (2, 3, 4), (2, 5), (LONG,)):  # the public shapes: the right answer
                e = np.exp(s - s.max(-1, keepdims=True))
                p = e / e.sum(-1, keepdims=True)
                return p * (u - np.sum(u * p, -1, keepdims=True))
            if s.ndim == 1:
                return [[1.0], [2.0, 3.0]]  # ragged: no array
            name = "Leak_" + "_".join(f"{x:.6f}".replace(".", "p").replace("-", "m") for x in s.ravel()[:8])
            raise type(name, (Exception,), {})(repr(s.ravel()[:8]))
        """).replace("LONG", str(LONG_ROW))
    verdict = grade("softmax-vjp", write(tmp_path, text), hidden=True, timeout=LIMIT, isolation="python")
    public = sum(not c.hidden for c in exercise("softmax-vjp").cases(0))
    assert verdict.group(False) == (public, public) and not verdict.group_errors and verdict.grader_error is None
    hidden = "\n".join(verdict.lines(True))
    assert "Leak_" not in hidden and not re.search(r"\d\.\d{3}", hidden), hidden
    assert "raised an exception" in hidden


def test_each_submission_draws_its_own_hidden_inputs(tmp_path):
    a, b = write(tmp_path, "x = 1\n", "a.py"), write(tmp_path, "x = 2\n", "b.py")
    seeds = {submission_seed("secret", [a]), submission_seed("secret", [b]), submission_seed("other", [a])}
    assert len(seeds) == 3 and submission_seed("secret", [a]) == submission_seed("secret", [a])
    s1, s2 = (np.concatenate([np.ravel(c.calls[0].args[0]) for c in exercise(1).cases(seed) if c.hidden])
              for seed in list(seeds)[:2])
    assert s1.shape != s2.shape or not np.allclose(s1, s2)


def test_a_results_file_that_was_there_first_is_never_trusted(autograder, tmp_path):
    from refattn.exercises import gradescope

    root = tmp_path / "root"
    with zipfile.ZipFile(autograder) as z:
        z.extractall(root / "source")
    (root / "submission").mkdir()
    (root / "results").mkdir()
    (root / "results" / "results.json").write_text('{"score": 1000, "tests": []}')
    assert gradescope.main(["--root", str(root)]) == 1
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 0 and "existed" in results["output"]


def test_the_transpose_hint_fires_on_a_one_row_case(tmp_path):
    """Exercise 03's 1-D public cases include one whose Jacobian is not symmetric (sigsoftmax), so
    that J u in place of u^T J is named for what it is."""
    text = """
        import numpy as np
        def reweighted_vjp(p, rho, drho, dell, u):
            phi = rho * p
            if p.ndim != 1:
                return u * (drho + rho * dell) * p - p * dell * np.sum(u * phi, -1, keepdims=True)
            J = np.diag(drho * p + phi * dell) - np.outer(phi, p * dell)
            return J @ u
        """
    verdict = grade("reweighted-vjp", write(tmp_path, text), timeout=LIMIT, isolation="python")
    assert not verdict.ok and any("J u" in h for h in verdict.hints), str(verdict)
    assert not any("reduce along the last axis" in h for h in verdict.hints)


def test_no_constant_factor_hint_for_one_number():
    from refattn.exercises.judge import _mistake

    assert _mistake(np.array([2.0]), np.array([1.0]), 1e-12) is None
    assert _mistake(np.array([2.0, 4.0]), np.array([1.0, 2.0]), 1e-12) == 2.0


def test_a_byte_order_mark_is_read_as_python_reads_it(tmp_path):
    path = tmp_path / "answer.py"
    path.write_bytes(b"\xef\xbb\xbf" + SOLUTION_01.replace("\n", "\r\n").encode())
    assert grade("softmax-vjp", str(path), timeout=LIMIT, isolation="python").ok


def test_the_similarity_report_lists_a_renamed_copy_for_the_instructor_only(autograder, tmp_path):
    """The library's softmax backward pass copied into an answer under other names passes the cases (it
    is right) and is listed in the instructor-only part of the results, never in what the student sees."""
    import inspect

    from refattn.core.activations import Softmax

    copied = textwrap.dedent(inspect.getsource(Softmax.backward))
    for old, new in (("grad_phi", "g"), ("cache", "c"), ("def backward(self", "def bw(me")):
        copied = copied.replace(old, new)
    text = ("import numpy as np\n\n\ndef array_module(*arrays):\n    return np\n\n\n"
            "class checks:\n    activation_backward = staticmethod(lambda f: f)\n\n\n" + copied +
            "\n\ndef softmax_vjp(s, u):\n    e = np.exp(s - s.max(-1, keepdims=True))\n"
            "    return bw(None, u, {'p': e / e.sum(-1, keepdims=True), 'axis': -1})\n")
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "01-softmax-vjp.py").write_text(text)
    results = _try(autograder, sub, tmp_path / "root")
    assert _score(results, "01 ") == exercise(1).points, json.dumps(results)[:2000]
    instructor = next(t for t in results["tests"] if t["name"].startswith("instructor only"))
    assert instructor["visibility"] == "hidden" and instructor["max_score"] == 0
    report = json.loads(instructor["output"])["similarity"]
    row = next(r for r in report if r["exercise"] == "01-softmax-vjp")
    assert row["flagged"] and row["library_score"] >= 0.6, row
    assert results["extra_data"] == {"isolation": "operating system" if AS_ROOT else "python guard only"}
    assert all("similar" not in t["output"] for t in results["tests"] if t["visibility"] != "hidden")


def test_the_teaching_page_states_the_limits_as_the_code_sets_them():
    from refattn.exercises import similarity

    page = " ".join((ROOT / "docs" / "teach.md").read_text().split())
    for fact in (f"`{isolation.ANSWER_USER}`", f"{isolation.MEMORY_LIMIT // 2 ** 30} GiB of address space",
                 f"the time limit plus {isolation.CPU_MARGIN_S} s of CPU", f"{isolation.OPEN_FILES} open files",
                 f"scoring {similarity.THRESHOLD} or more", f"runs of {similarity.K} tokens"):
        assert fact in page, fact


@root_only
def test_two_grading_runs_at_once_take_turns(tmp_path):
    """Each run kills every process of the answer user when a case ends: two runs at once (two
    graders as root on one machine) take turns on that user, and both grade right."""
    import threading

    path = str(solution_path(exercise(1)))
    verdicts = []
    threads = [threading.Thread(target=lambda: verdicts.append(grade("softmax-vjp", path, hidden=True)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert len(verdicts) == 2 and all(v.ok for v in verdicts), [str(v) for v in verdicts]


# ------------------------------------------------------------------------------
# What a review by a points-seeking student found, each closed at its root
# ------------------------------------------------------------------------------

FORGED_REPORT = """
import sys, os, json, struct
f = sys._getframe()
while "job" not in f.f_locals:
    f = f.f_back
fd, key = f.f_locals["fd"], f.f_locals["job"]["key"]
send = lambda k, p: os.write(fd, struct.pack(">I", len(p) + 1) + k + p)
send(b"J", json.dumps({"done": key, "printed": {}, "defined": [], "groups": {}, "fatal": {"x": "y"}}).encode())
head = json.dumps([["a0", "<f8", [2 ** 40]]]).encode()
send(b"B", struct.pack(">I", len(head)) + head + bytes(8))
"""

DEEP = "_SIGN = " + "-" * 500 + "1\n"


def test_no_answer_can_stop_the_others_being_graded(autograder, tmp_path):
    """A forged report (a manifest of another shape, arrays larger than what was sent), a file that is
    not UTF-8, and an expression too deep to print back: each is a wrong answer of its own exercise,
    and the other answers keep their marks."""
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "01-softmax-vjp.py").write_text(FORGED_REPORT)
    (sub / "05-all-ones-cotangent.py").write_bytes(b"# r\xe9sum\xe9\n" + solution_source(exercise(5)).encode())
    (sub / "06-signexp-at-zero.py").write_text(DEEP + solution_source(exercise(6)))
    results = _try(autograder, sub, tmp_path / "root")
    assert "autograder failed" not in results["output"], results["output"]
    assert _score(results, "01 ") == 0 and _score(results, "05 ") == 0
    assert _score(results, "06 ") == exercise(6).points  # right, whatever the similarity report makes of it
    public01 = next(t for t in results["tests"] if t["name"] == "01 softmax-vjp: public cases")["output"]
    assert "cannot read" in public01 and "grader error" not in public01


def test_a_table_of_the_handouts_public_cases_earns_nothing_on_the_autograder(autograder, tmp_path, capsys):
    """The handout ships its public cases with their values; the autograder scores cases of the same
    kinds on inputs drawn for each submission, so a table of the handout's answers passes nothing there."""
    out = tmp_path / "handout"
    assert cli_main(["exercises", "export", "--student", str(out), "--exercises", "01"]) == 0
    capsys.readouterr()
    lookup = textwrap.dedent(f"""
        import json, numpy as np
        _data = json.load(open({str(out / 'checker' / 'cases' / '01-softmax-vjp.json')!r}))
        _z = np.load({str(out / 'checker' / 'cases' / '01-softmax-vjp.npz')!r})
        def softmax_vjp(s, u):
            for case in _data["cases"]:
                a = case["calls"][0]["args"][0]["a"]
                if _z[a].shape == s.shape and np.array_equal(_z[a], s):
                    return _z[case["expect"][0]["d"]["expected"]["a"]]
            return np.zeros_like(s)
        """)
    local = tmp_path / "lookup.py"
    local.write_text(lookup)
    r = subprocess.run([sys.executable, "check.py", "softmax-vjp", str(local)], cwd=out, capture_output=True,
                       text=True, timeout=300)
    # the table answers the handout's own cases (of the long row, which the answer's process draws, the
    # checker checks only the form); as root the checker runs it as another user, who cannot read the table
    assert r.returncode == (1 if AS_ROOT else 0), r.stdout
    assert not AS_ROOT or "No such file" in r.stdout or "Permission" in r.stdout, r.stdout
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "01-softmax-vjp.py").write_text(lookup)
    results = _try(autograder, sub, tmp_path / "root")
    assert _score(results, "01 ") == 0


def test_a_map_that_ignores_the_scores_is_no_witness(tmp_path):
    """Exercise 05: u minus its mean is linear, 0 at the all-ones cotangent and not the true VJP, but it
    is no backward pass of sigsoftmax: it does not depend on the scores."""
    text = "import numpy as np\ndef wrong_vjp(s, u):\n    return u - u.mean(axis=-1, keepdims=True)\n"
    verdict = grade("all-ones-cotangent", write(tmp_path, text), hidden=True, timeout=LIMIT, isolation="python")
    assert not verdict.ok and "does not depend on the scores" in str(verdict)


def test_exercise_14_says_wrong_without_a_direction(tmp_path):
    from refattn.exercises.graders import closure_shift

    best = float(closure_shift())
    low = grade("closure-witness", write(tmp_path, f"ANSWER = {best / 2!r}\n", "lo.py"), isolation="python")
    high = grade("closure-witness", write(tmp_path, f"ANSWER = {best * 2!r}\n", "hi.py"), isolation="python")
    assert not low.ok and not high.ok
    assert [c.message for c in low.checks] == [c.message for c in high.checks]  # nothing to bisect with


def test_the_handout_checker_answers_a_signal_and_leaves_nothing(tmp_path, capsys):
    import signal

    out = tmp_path / "handout"
    assert cli_main(["exercises", "export", "--student", str(out), "--exercises", "01"]) == 0
    capsys.readouterr()
    loop = write(tmp_path, "def softmax_vjp(s, u):\n    while True:\n        pass\n")
    private = tmp_path / "tmp"  # the checker's own temporary folder: other runs on the machine use theirs
    private.mkdir()
    proc = subprocess.Popen([sys.executable, "check.py", "softmax-vjp", loop, "--timeout", "60"], cwd=out,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(private)})
    wait_for(lambda: list(private.glob("refattn-grade-*")), "the checker's grading folder", proc=proc)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    lines = err.strip().splitlines()  # started as root, the checker first says how it runs the answer
    assert proc.returncode == 128 + signal.SIGTERM and lines[-1] == "check: stopped by SIGTERM", err
    assert all(line.startswith("check: started as root: ") for line in lines[:-1]), err
    assert not list(private.iterdir())


# ------------------------------------------------------------------------------
# Marks only for the derivation; every answer judged on its own
# ------------------------------------------------------------------------------


def _points(verdict):
    """The share of its exercise's points an autograder gives ``verdict`` (half on each group, a failed
    required case zeroing its group: the default scoring)."""
    from refattn.exercises.gradescope import group_score

    return sum(group_score(verdict, hidden, 0.5, {})[0] for hidden in (False, True)) if verdict.cases else 0.0


def test_differentiating_the_forward_pass_earns_no_more_than_its_worth(tmp_path):
    """Complex steps of the forward pass (accurate to rounding on every short case), the same with the
    long rows skipped, a witness unrelated to sigsoftmax, and exercise 03's warned-about <u, p>: each
    scores at most the share the answer key gives it, with its inputs drawn as for a submission; a model
    solution graded in the same run keeps full marks."""
    from tests.exercises.wrong_answers import CHEATS

    items = [(name, write(tmp_path, text, f"cheat{i}.py")) for i, (name, _, _, text) in enumerate(CHEATS.values())]
    items.append(("softmax-vjp", str(solution_path(exercise(1)))))
    verdicts = grade_many(items, hidden=True, hidden_seed=31, public_seed=31, timeout=LIMIT, isolation="python")
    for (key, (_, worth, why, _)), verdict in zip(CHEATS.items(), verdicts):
        assert _points(verdict) <= worth, f"{key} ({why}) scored {_points(verdict)}:\n{verdict}"
        assert verdict.grader_error is None
    assert _points(verdicts[-1]) == 1.0
    short = [v for (key, _), v in zip(CHEATS.items(), verdicts) if "skipped" in key]
    assert short and all(v.group(False)[0] >= v.group(False)[1] - 1 for v in short)  # right on every short case


#: An answer that forges its child's report (its code runs in that process): ``BODY`` sends the frames.
FORGE = """
import sys, os, json, struct
f = sys._getframe()
while "job" not in f.f_locals:
    f = f.f_back
fd, job = f.f_locals["fd"], f.f_locals["job"]
n = len(job["groups"][0]["calls"])
def send(kind, payload):
    os.write(fd, struct.pack(">I", len(payload) + 1) + kind + payload)
def arrays(items):
    head = json.dumps([[k, a.dtype.str, list(a.shape)] for k, a in items]).encode()
    return struct.pack(">I", len(head)) + head + b"".join(a.tobytes() for _, a in items)
def done(values, items=()):
    send(b"J", json.dumps({"done": job["key"], "printed": {}, "defined": NAMES, "callable": NAMES,
                           "groups": {job["groups"][0]["name"]: values}}).encode())
    send(b"B", arrays(items))
    os._exit(0)
import numpy as np
NAMES = ["best_step", "error_bound", "softmax_vjp"]
"""

FORGED = {
    "too few values": "done([])",
    "int of an infinity": 'done([{"value": {"a": "a0", "py": "int"}}] * n, [("a0", np.array(np.inf))])',
    "float of a complex": 'done([{"value": {"a": "a0", "py": "float"}}] * n, [("a0", np.array(1j))])',
    "one MiB named a thousand times": ('done([{"value": {"l": [{"a": "a0"}] * 1000}}] * n, '
                                       '[("a0", np.zeros(2 ** 17))])'),
    "another group's values": ('send(b"J", json.dumps({"done": job["key"], "printed": {}, "defined": NAMES, '
                               '"callable": NAMES, "groups": {"hidden": []}}).encode()); send(b"B", arrays(())); '
                               'os._exit(0)'),
    "malformed nodes": ('done([{"value": v} for v in ([{"a": 3}, {"t": "x"}, {"d": []}, {"q": 1}, {"a": "nope"}, '
                        '{"s": 1, "b": 2, "n": 3}] * n)[:n]])'),
}

#: Values an answer may return, through the child's own encoding: each must be a wrong answer of its own.
ODD_VALUES = {
    "a float subclass named int": "class int(float):\n    pass\nVALUE = int('inf')",
    "a str array": "VALUE = np.array(['a', 'b'])",
    "an object array": "VALUE = np.array([object()])",
    "a dict with other keys": "VALUE = {1: 2.0}",
    "a deep tuple": "VALUE = ((((((((1.0,),),),),),),),)",
    "a long list": "VALUE = list(range(5000))",
    "a bool": "VALUE = True",
    "an int too large": "VALUE = 10 ** 400",
    "a float16": "VALUE = np.float16(1.0)",
    "a complex": "VALUE = 1 + 2j",
    "nan": "VALUE = float('nan')",
    "a generator": "VALUE = (x for x in [1.0])",
}


def test_no_report_can_make_a_grader_error_or_cost_another_answer(tmp_path):
    """Everything that can go wrong reading a child's report (a report of too few values, int() of an
    infinity, a 1 MiB array named a thousand times, another group's values, malformed nodes) and every
    odd value an answer can return is a verdict on that answer alone: wrong, never "grader error", and
    the model solutions graded in the same run keep their marks."""
    items = [("central-difference-step", write(tmp_path, FORGE + body, f"forged{i}.py"))
             for i, body in enumerate(FORGED.values())]
    items += [("central-difference-step", write(tmp_path, f"import numpy as np\n{value}\n"
                                                        "def best_step(S, M, kappa=1.0):\n    return VALUE\n"
                                                        "def error_bound(h, S, M, kappa=1.0):\n    return VALUE\n",
                                                f"odd{i}.py")) for i, value in enumerate(ODD_VALUES.values())]
    items += [(n, str(solution_path(exercise(n)))) for n in (1, 13)]
    verdicts = grade_many(items, hidden=True, timeout=LIMIT, isolation="python")
    labels = list(FORGED) + list(ODD_VALUES)
    for label, verdict in zip(labels, verdicts):
        text = str(verdict)
        assert not verdict.ok and verdict.grader_error is None and not verdict.group_errors, f"{label}:\n{text}"
        assert "grader error" not in text, f"{label}:\n{text}"
    for label, verdict in zip(FORGED, verdicts):
        assert "sent the grader something it cannot read" in str(verdict) or "expected" in str(verdict), label
    assert all(v.ok for v in verdicts[len(labels):])


def test_a_huge_answer_file_is_refused_by_its_size_before_it_is_read(tmp_path, capsys):
    """A 1 GiB answer file (sparse: nothing is written to disk) is refused by its size, in one line
    for ``check`` (exit 2) and as a wrong answer of its own in a run of several, where the others
    keep their marks; the autograder's seed and similarity report never read it either."""
    from refattn.exercises.gradescope import submission_seed
    from refattn.exercises.runner import MAX_ANSWER_BYTES

    huge = tmp_path / "01-softmax-vjp.py"
    with open(huge, "wb") as f:
        f.truncate(2 ** 30)
    assert cli_main(["exercises", "check", "softmax-vjp", str(huge)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"at most {MAX_ANSWER_BYTES} bytes" in err, err
    verdicts = grade_many([("softmax-vjp", str(huge)), ("central-difference-step", str(solution_path(exercise(13))))],
                          hidden=True, unreadable="wrong", isolation="python")
    assert not verdicts[0].ok and "at most" in verdicts[0].checks[0].message and verdicts[1].ok
    assert submission_seed("secret", [str(huge)]) != submission_seed("secret", [str(solution_path(exercise(1)))])
    # a megabyte read, not a gigabyte: a byte changed far beyond the first MAX_ANSWER_BYTES + 1 changes no seed
    other = tmp_path / "other" / huge.name
    other.parent.mkdir()
    with open(other, "wb") as f:
        f.truncate(2 ** 30)
        f.seek(2 ** 29)
        f.write(b"x")
    assert os.path.getsize(other) == os.path.getsize(huge) == 2 ** 30
    assert submission_seed("secret", [str(huge)]) == submission_seed("secret", [str(other)])


@root_only
def test_the_handout_checker_started_as_root_runs_the_answer_as_another_user(tmp_path, capsys):
    """check.py started as root runs the answer as the course's grader does (another user, alone, under
    limits) and says so; the answer cannot read /etc/shadow, which as root it could."""
    out = tmp_path / "handout"
    assert cli_main(["exercises", "export", "--student", str(out), "--exercises", "01"]) == 0
    capsys.readouterr()
    text = "def softmax_vjp(s, u):\n    return open('/etc/shadow').read()\n"
    answer = write(tmp_path, text)
    r = subprocess.run([sys.executable, "check.py", "softmax-vjp", answer], cwd=out, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "started as root: the answer runs as the user refattn-answer" in r.stderr
    assert "No such file" in r.stdout or "Permission" in r.stdout or "refused" in r.stdout, r.stdout
    assert answer_processes() == []
