"""The exercises: every model solution passes its grader, a plausible wrong answer fails it,
and ``refattn exercises`` lists, grades and refuses bad input as documented.

The model solutions live in ``exercises/solutions/`` (found from the repository
root, as a user would give the path); the wrong answers are written here, one
per exercise, so that they never sit beside the solutions.
"""

import json
import os
import textwrap
from pathlib import Path

import pytest

from refattn.cli import main as cli_main
from refattn.exercises import EXERCISES, exercise, grade, list_exercises, main as exercises_main

ROOT = Path(__file__).resolve().parent.parent

#: One plausible wrong answer per exercise, and a word on what is wrong with it.
WRONG = {
    "softmax-vjp": ("forgets the -<u, phi> term", """
        import numpy as np
        def softmax_vjp(s, u):
            e = np.exp(s - s.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True) * u
        """),
    "tanhmax-derivatives": ("log(cosh(s)) overflows beyond 710", """
        import numpy as np
        def ell(s):
            with np.errstate(over="ignore"):
                return np.log(np.cosh(s))
        def drho(s):
            return 1.0 - np.tanh(s) ** 2
        def dell(s):
            return np.tanh(s)
        """),
    "reweighted-vjp": ("<u, p> instead of <u, phi>: right only where rho = 1", """
        import numpy as np
        def reweighted_vjp(p, rho, drho, dell, u):
            return u * (drho + rho * dell) * p - p * dell * np.sum(u * p, -1, keepdims=True)
        """),
    "jacobian": ("the transpose: right only for symmetric Jacobians", """
        import numpy as np
        def jacobian(act, s):
            p, rho, dell = act.p(s), act.rho(s), act.dell(s)
            phi = rho * p
            return (np.diag(act.drho(s) * p + phi * dell) - np.outer(phi, p * dell)).T
        """),
    "all-ones-cotangent": ("the correct VJP: not wrong, so no witness", """
        import numpy as np
        def wrong_vjp(s, u):
            a = s + np.minimum(s, 0.0) - np.log1p(np.exp(-np.abs(s)))
            p = np.exp(a - a.max(-1, keepdims=True))
            p = p / p.sum(-1, keepdims=True)
            pl = p * (1.0 + 1.0 / (1.0 + np.exp(s)))
            return u * pl - pl * np.sum(u * p, -1, keepdims=True)
        """),
    "signexp-at-zero": ("the jump without its factor 2", """
        import numpy as np
        def _rv(s, u, j):
            o = np.arange(len(s)) != j
            e = np.exp(np.abs(s[o]))
            return e.sum(), np.sum(u[o] * np.sign(s[o]) * e)
        def jump(s, u, j):
            R, _ = _rv(s, u, j)
            return u[j] / (R + 1.0)
        def slopes(s, u, j):
            R, V = _rv(s, u, j)
            return (u[j] * R - V) / (R + 1.0) ** 2, (u[j] * R + V) / (R + 1.0) ** 2
        def central_at_zero(s, u, j, eps):
            a, b = slopes(s, u, j)
            return jump(s, u, j) / (2.0 * eps) + 0.5 * (a + b)
        """),
    "tanhmax-velocity": ("Eq. 7 as printed: no minus sign", """
        import numpy as np
        def velocity(s, o, c, delta_I):
            a = np.abs(s)
            l = a + np.log1p(np.exp(-2.0 * a))
            e = np.exp(l - l.max(-1, keepdims=True))
            wt = e / e.sum(-1, keepdims=True)
            wh = np.tanh(s) * wt
            return delta_I * (wt * o - wh * np.sum(wh * o, -1, keepdims=True)) * c[:, None]
        """),
    "prop1-new-activation": ("softmax's closed form: forgets ell' = sigmoid/softplus", """
        import numpy as np
        def delta_II(s, o):
            sp = np.logaddexp(0.0, s)
            w = sp / sp.sum(-1, keepdims=True)
            return w * (o - np.sum(w * o, -1, keepdims=True))
        """),
    "closure-gap": ("the first-order approximation 2q", """
        import numpy as np
        def gap(s, c):
            return 2.0 * np.exp(np.logaddexp.reduce(-s) - np.logaddexp.reduce(s) - 2.0 * c)
        """),
    "neural-score-vjp": ("forgets beta = 1/sqrt(d)", """
        import numpy as np
        def neural_vjp(q, k, params, grad_s):
            P = params
            qp, kp = q @ P["Wq"].T, k @ P["Wk"].T
            z = (qp @ P["Whq"].T)[:, None, :] + (kp @ P["Whk"].T)[None, :, :] + P["bh"]
            t = np.tanh(z)
            G = grad_s
            gz = G[..., None] * P["wa"] * (1.0 - t * t)
            da, db = gz.sum(1), gz.sum(0)
            dqp, dkp = da @ P["Whq"], db @ P["Whk"]
            dp = {"Wq": dqp.T @ q, "Wk": dkp.T @ k, "Whq": da.T @ qp, "Whk": db.T @ kp,
                  "bh": gz.sum((0, 1)), "wa": np.einsum("ij,ijh->h", G, t), "ba": G.sum()}
            return dqp @ P["Wq"], dkp @ P["Wk"], dp
        """),
    "expressive-angle": ("where DPA reaches EA's small-c limit 1/cos^2, not EA itself", """
        import math
        def crossover(theta):
            c = math.cos(theta)
            return -2.0 * math.log(c) / (1.0 - c)
        """),
    "no-normaliser": ("z^2/(1+z^2) divided by its sum: 0/0 and inf/inf", """
        import numpy as np
        def expressive_weights(s, mask=None):
            with np.errstate(all="ignore"):
                h = s * s / (1.0 + s * s)
                if mask is not None:
                    h = np.where(mask, h, 0.0)
                return h / h.sum(-1, keepdims=True)
        """),
    "central-difference-step": ("u^(1/3), ignoring S, M and the factor 3", """
        U = 2.0 ** -53
        def error_bound(h, S, M, kappa=1.0):
            return M * h * h / 6.0 + kappa * U * S / h
        def best_step(S, M, kappa=1.0):
            return U ** (1.0 / 3.0)
        """),
    "closure-witness": ("a shift far larger than needed", "ANSWER = 12.0\n"),
}


def solution(ex):
    return ROOT / ex.solution


def write(tmp_path, text, name="answer.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_at_least_twelve_exercises_each_with_statement_and_solution():
    assert len(EXERCISES) >= 12
    assert [ex.number for ex in EXERCISES] == list(range(1, len(EXERCISES) + 1))
    readme = (ROOT / "exercises" / "README.md").read_text()
    for ex in EXERCISES:
        statement = ROOT / ex.statement
        assert statement.is_file(), ex.statement
        text = statement.read_text()
        assert f"refattn exercises check {ex.name} FILE.py" in text
        for sig in ex.defines:
            assert sig.split("(")[0] in text, (ex.name, sig)
        assert solution(ex).is_file(), ex.solution
        assert f"({ex.stem}.md)" in readme and f"`{ex.name}`" in readme
    assert set(WRONG) == {ex.name for ex in EXERCISES}
    # statements and solutions are kept apart: no answer code beside a statement
    assert not list((ROOT / "exercises").glob("*.py"))


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.name)
def test_model_solution_passes(ex):
    verdict = grade(ex.name, solution(ex))
    assert verdict.ok, str(verdict)
    assert verdict.checks and all(ok for ok, _ in verdict.checks)


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.name)
def test_plausible_wrong_answer_fails(ex, tmp_path):
    why, text = WRONG[ex.name]
    verdict = grade(ex.name, write(tmp_path, text))
    assert not verdict.ok, f"a wrong answer ({why}) passed:\n{verdict}"
    failed = [msg for ok, msg in verdict.checks if not ok]
    assert failed and all(msg.strip() for msg in failed)


def test_failure_says_where_and_expected_against_got(tmp_path):
    verdict = grade("softmax-vjp", write(tmp_path, WRONG["softmax-vjp"][1]))
    msg = next(m for ok, m in verdict.checks if not ok)
    assert "at index" in msg and "expected" in msg and "got" in msg and "s[" in msg and "u[" in msg
    verdict = grade("no-normaliser", write(tmp_path, WRONG["no-normaliser"][1]))
    assert any("rows [2, 3, 4" in m for ok, m in verdict.checks if not ok), str(verdict)


def test_names_and_numbers_resolve():
    assert exercise("softmax-vjp") is exercise("1") is exercise("01") is exercise("01-softmax-vjp")
    with pytest.raises(ValueError, match="NAME: unknown exercise 'nope'"):
        exercise("nope")


def test_list_is_strict_json_with_name_title_statement_kind(capsys):
    assert cli_main(["exercises", "--json"]) == 0
    items = json.loads(capsys.readouterr().out)
    assert items == list_exercises()
    assert len(items) == len(EXERCISES)
    for item in items:
        assert {"name", "title", "statement", "kind"} <= set(item)
        assert item["kind"] in ("function", "number")
        assert (ROOT / item["statement"]).is_file()
    assert cli_main(["exercises"]) == 0
    out = capsys.readouterr().out
    assert all(ex.name in out for ex in EXERCISES)


def test_check_exit_codes(tmp_path, capsys):
    ex = EXERCISES[0]
    assert cli_main(["exercises", "check", ex.name, str(solution(ex))]) == 0
    assert "CORRECT" in capsys.readouterr().out
    wrong = write(tmp_path, WRONG[ex.name][1])
    assert cli_main(["exercises", "check", ex.name, wrong]) == 1
    assert "WRONG" in capsys.readouterr().out
    assert cli_main(["exercises", "check", "--json", ex.name, wrong]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["ok"] is False and verdict["exercise"] == ex.stem
    # bad input: one line naming it, exit 2
    assert cli_main(["exercises", "check", "no-such-exercise", str(solution(ex))]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'no-such-exercise'" in err
    missing = str(tmp_path / "missing.py")
    assert cli_main(["exercises", "check", ex.name, missing]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing.py" in err
    # the same through python -m refattn.exercises's main
    assert exercises_main(["check", ex.name, missing]) == 2
    capsys.readouterr()


@pytest.mark.parametrize("text, expect", [
    ("def softmax_vjp(s, u):\n    return 1 / 0\n", "raised ZeroDivisionError"),
    ("import numpy as np\n", "defines no function softmax_vjp(s, u)"),
    ("def softmax_vjp(s, u) return s\n", "raised SyntaxError"),
    ("raise RuntimeError('boom')\n", "raised RuntimeError: boom"),
    ("def softmax_vjp(s, u):\n    return s[:1]\n", "expected shape"),
])
def test_broken_answers_are_wrong_not_bad_input(tmp_path, capsys, text, expect):
    path = write(tmp_path, text)
    assert cli_main(["exercises", "check", "softmax-vjp", path]) == 1
    assert expect in capsys.readouterr().out


def test_number_answer_must_be_a_number(tmp_path):
    verdict = grade("closure-witness", write(tmp_path, "ANSWER = 'six'\n"))
    assert not verdict.ok and "finite real number" in str(verdict)
    verdict = grade("closure-witness", write(tmp_path, "ANSWER = 6.0\n"))
    assert not verdict.ok and "too small" in str(verdict)


def test_graders_do_not_need_the_answer_inside_the_package(tmp_path):
    """A copy of a model solution in an unrelated folder, with an unusual file name, grades
    the same: the grader imports the file from its path, not from the package."""
    ex = exercise("reweighted-vjp")
    other = tmp_path / "some where" / "my answer (v2).py"
    other.parent.mkdir()
    other.write_text(solution(ex).read_text())
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert grade(ex.name, str(other)).ok
    finally:
        os.chdir(cwd)
