"""The exercises: every model solution passes its grader (public and hidden cases), a plausible
wrong answer fails it with feedback a student can act on, and ``refattn exercises`` lists,
labels, grades and refuses bad input as documented.

The model solutions are the exercises' single sources (``instructor/solutions/`` in the clone);
the wrong answers are written here, one per exercise, so that they never sit beside the
solutions. All answers of one kind are graded in one run (one child process), module-scoped.
The sandbox, the export and the autograder are tested in ``test_exercises_kit.py``.
"""

import dataclasses
import json
import math
import os
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

from refattn.cli import main as cli_main
from refattn.exercises import (EXERCISES, PARTS, exercise, grade, grade_many, isolation, list_exercises,
                               main as exercises_main)
from refattn.exercises.gradescope import group_score
from refattn.exercises.grading import forbidden_places
from refattn.exercises.judge import ALLOWED, MAX_LINE, ROUNDINGS, expectations, judge_answer, tolerance
from refattn.exercises.export import solution_path
from refattn.exercises.runner import run_groups
from tests.exercises.right_answers import RIGHT
from tests.exercises.wrong_answers import WRONG

ROOT = Path(__file__).resolve().parents[2]

#: Wrong answers that a grader recognises, and the hint each must get.
HINTED = {
    "sign": ("tanhmax-velocity", WRONG["tanhmax-velocity"][1], "the sign is flipped"),
    "factor": ("neural-score-vjp", WRONG["neural-score-vjp"][1], "off by a constant factor: your result is 2.23607"),
    "transpose": ("jacobian", WRONG["jacobian"][1], "transpose"),
    "axis": ("softmax-vjp", """
        import numpy as np
        def softmax_vjp(s, u):
            e = np.exp(s - np.max(s))
            phi = e / np.sum(e)
            return phi * (u - np.sum(u * phi))
        """, "reduce along the last axis only"),
    "overflow": ("softmax-vjp", """
        import numpy as np
        def softmax_vjp(s, u):
            with np.errstate(all="ignore"):
                e = np.exp(s)
                phi = e / np.sum(e, axis=-1, keepdims=True)
                return phi * (u - np.sum(u * phi, axis=-1, keepdims=True))
        """, "NaN or inf where the true value is finite"),
}

#: The model solution of exercise 12 with ``s == 0`` for the sqrt(tiny) rule: wrong at s = 1e-154, where
#: h(s) = 1e-308 is not 0, which public cases have too (the convention the statement requires).
EXACT_ZERO_RULE = """
    import numpy as np
    def expressive_weights(s, mask=None):
        zero = s == 0
        w = 1.0 / np.where(zero, 1.0, s)
        h = np.where(zero, 0.0, 1.0 / (1.0 + w * w))
        if mask is not None:
            h = np.where(mask, h, 0.0)
        z = np.sum(h, axis=-1, keepdims=True)
        return h / np.where(z > 0, z, 1.0)
    """


def solution(ex):
    return solution_path(ex)


def write(tmp_path, text, name="answer.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


class _Solved(dict):
    """Every model solution graded, public and hidden cases, once per hidden seed asked for."""

    def __missing__(self, seed):
        items = [(ex, solution(ex)) for ex in EXERCISES]
        # another seed: the public cases drawn from it too, as an autograder draws them per submission
        verdicts = grade_many(items, hidden=True, hidden_seed=seed, public_seed=seed)
        self[seed] = dict(zip((ex.name for ex in EXERCISES), verdicts))
        return self[seed]


@pytest.fixture(scope="module")
def solved():
    """The model solutions' verdicts by hidden seed: the default seed in the quick tier, another in the slow."""
    return _Solved()


@pytest.fixture(scope="module")
def wrong(tmp_path_factory):
    """Every wrong answer of :data:`WRONG` and :data:`HINTED`, graded with hidden cases in one run."""
    d = tmp_path_factory.mktemp("wrong")
    items = [(name, write(d, text, f"{name}.py")) for name, (_, text) in WRONG.items()]
    items += [(name, write(d, text, f"hint-{key}.py")) for key, (name, text, _) in HINTED.items()]
    items.append(("no-normaliser", write(d, EXACT_ZERO_RULE, "exact-zero.py")))
    verdicts = grade_many(items, hidden=True)
    keys = list(WRONG) + [f"hint-{k}" for k in HINTED] + ["exact-zero"]
    return dict(zip(keys, verdicts))


def test_registry_statements_labels_and_solutions():
    assert len(EXERCISES) >= 12
    assert [ex.number for ex in EXERCISES] == list(range(1, len(EXERCISES) + 1))
    readme = (ROOT / "exercises" / "README.md").read_text()
    for ex in EXERCISES:
        text = (ROOT / ex.statement).read_text()
        assert f"refattn exercises check {ex.name} FILE.py" in text
        assert ex.label_line in text and ALLOWED in text, ex.name
        for sig in ex.defines:
            assert sig.split("(")[0] in text, (ex.name, sig)
        # statements point at derivations, never at the library code that is the answer
        assert "derivations/" in text and not re.search(r"refattn/(core|theory|studies|fast)|refattn\.\w+\.", text)
        assert solution(ex).is_file(), ex.solution
        # where a student may run the hidden cases (a clone), and who runs them otherwise
        has_hidden = any(c.hidden for c in ex.cases(0))
        assert ("add `--hidden` to `refattn exercises check`" in text) == has_hidden, ex.name
        row = f"| {ex.number} | `{ex.name}` | {ex.difficulty} of 3 | {ex.minutes} |"
        assert row in readme and f"({ex.stem}.md)" in readme, ex.name
        assert ex.part in PARTS and ex.difficulty in (1, 2, 3) and 5 <= ex.minutes <= 120
    for part, title in PARTS.items():
        assert f"## Part {part}: {title}" in readme
        assert any(ex.part == part for ex in EXERCISES)
    assert set(WRONG) == {ex.name for ex in EXERCISES}
    # the book renders exercises/: statements only, no answer code
    assert not list((ROOT / "exercises").rglob("*.py"))


@pytest.mark.parametrize("seed", [None, pytest.param(7, marks=pytest.mark.slow)], ids=["default-seed", "seed-7"])
@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.name)
def test_model_solution_passes_public_and_hidden(ex, seed, solved):
    verdict = solved[seed][ex.name]
    assert verdict.ok, str(verdict)
    assert verdict.checks and all(c.ok for c in verdict.checks)
    assert verdict.group(False)[1] >= 1
    assert verdict.group(True)[1] >= (0 if ex.kind == "number" else 2)
    assert verdict.hints == [] and verdict.printed == {}


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.name)
def test_a_right_answers_text_verdict_shows_its_evidence(ex, solved):
    """Every check of a public case that passed is in the text, one line each, not only in
    ``--json`` (exercise 05's witness: 0 at the all-ones cotangent, far from the true VJP at a
    random one; exercise 09's strict closed-form comparison beside the forward passes'); a
    hidden case is named by its kind only."""
    verdict = solved[None][ex.name]
    lines = str(verdict).splitlines()
    public = [c for c in verdict.checks if not c.hidden]
    assert public
    for c in public:
        assert sum(c.message in ln for ln in lines) >= 1, f"{ex.name}: not in the text verdict: {c.message}"
    for case in {c.case for c in public}:
        n = sum(c.case == case for c in public)
        assert (f"{case}: {n} checks passed:" in str(verdict)) == (n > 1), (case, str(verdict))
    for case in {c.case for c in verdict.checks if c.hidden}:
        assert f"  ok   hidden: {case}" in lines, (case, str(verdict))
    assert set(verdict.as_dict()) == {"exercise", "file", "ok", "checks", "cases", "hints", "printed",
                                      "hidden_run", "grader_error"}


@pytest.mark.slow
@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.name)
def test_plausible_wrong_answer_fails(ex, wrong):
    why = WRONG[ex.name][0]
    verdict = wrong[ex.name]
    assert not verdict.ok, f"a wrong answer ({why}) passed:\n{verdict}"
    failed = [c.message for c in verdict.checks if not c.ok]
    assert failed and all(m.strip() for m in failed)
    assert all(len(c.message) <= MAX_LINE for c in verdict.checks)


@pytest.mark.slow
def test_failure_says_where_and_expected_against_got(wrong):
    msg = next(c.message for c in wrong["softmax-vjp"].checks if not c.ok)
    assert "at index" in msg and "expected" in msg and "got" in msg and "s[" in msg and "u[" in msg
    assert any("NaN or inf in rows" not in c.message and "wrong" in c.message
               for c in wrong["no-normaliser"].checks if not c.ok)
    assert any(c.case == "an all-zero row (no normaliser)" and "NaN or inf" in c.message
               for c in wrong["no-normaliser"].checks if not c.ok), str(wrong["no-normaliser"])


@pytest.mark.slow
@pytest.mark.parametrize("key", list(HINTED))
def test_common_mistakes_get_a_hint(key, wrong):
    verdict = wrong[f"hint-{key}"]
    assert not verdict.ok
    assert any(HINTED[key][2] in h for h in verdict.hints), str(verdict)


@pytest.mark.slow
def test_hidden_failures_name_the_kind_not_the_input(wrong):
    """A failing hidden case says what kind of case failed, never an input, an index or a value; and
    exercise 12's public check catches the slip of its sqrt(tiny) convention, as the hidden one does."""
    verdict = wrong["exact-zero"]
    failed = [c for c in verdict.checks if not c.ok]
    assert {c.case for c in failed if not c.hidden} == {"scores just below sqrt(tiny), about 1e-154 (count as 0)",
                                                        "both sides of sqrt(tiny) in one row"}, str(verdict)
    assert {c.case for c in failed if c.hidden} >= {"scores just below sqrt(tiny), about 1e-154 (count as 0)",
                                                    "both sides of sqrt(tiny) in one row"}
    assert "scores above sqrt(tiny), about 1e-150 (h ~ z^2 is tiny but counts)" not in {c.case for c in failed}
    for c in (c for v in wrong.values() for c in v.checks if c.hidden and not c.ok):
        assert not re.search(r"expected|got|index|\bs\[|\[[-0-9.e, ]+\]", c.message), c.message


@pytest.mark.slow
def test_autograd_feedback_names_the_gradient_and_stays_short(wrong):
    verdict = wrong["neural-score-vjp"]
    lines = [c.message for c in verdict.checks if not c.ok and "against autograd" in c.message and not c.hidden]
    assert lines and all(len(m) <= 400 for m in lines)
    assert any("dparams['Wq'] (against autograd)" in m and "at index" in m for m in lines), lines
    assert len(str(verdict).splitlines()) <= 40, str(verdict)


def test_names_and_numbers_resolve():
    assert exercise("softmax-vjp") is exercise("1") is exercise("01") is exercise("01-softmax-vjp")
    with pytest.raises(ValueError, match="NAME: unknown exercise 'nope'"):
        exercise("nope")


def test_list_is_strict_json_with_labels(capsys):
    assert cli_main(["exercises", "--json"]) == 0
    items = json.loads(capsys.readouterr().out)
    assert items == list_exercises()
    assert len(items) == len(EXERCISES)
    for item, ex in zip(items, EXERCISES):
        assert {"name", "title", "statement", "kind", "part", "part_title", "difficulty", "minutes"} <= set(item)
        assert (item["part"], item["difficulty"], item["minutes"]) == (ex.part, ex.difficulty, ex.minutes)
        assert item["kind"] in ("function", "number")
        assert (ROOT / item["statement"]).is_file()
    assert cli_main(["exercises"]) == 0
    out = capsys.readouterr().out
    for part, title in PARTS.items():
        assert f"Part {part}: {title}" in out
    for ex in EXERCISES:
        assert re.search(rf"\b{ex.number}\s+{re.escape(ex.name)}\s+{ex.difficulty}/3\s+{ex.minutes}\b", out), ex.name


@pytest.mark.slow
def test_check_exit_codes(tmp_path, capsys):
    ex = EXERCISES[0]
    assert cli_main(["exercises", "check", ex.name, str(solution(ex))]) == 0
    assert "CORRECT" in capsys.readouterr().out
    wrong_answer = write(tmp_path, WRONG[ex.name][1])
    assert cli_main(["exercises", "check", ex.name, wrong_answer]) == 1
    assert "WRONG" in capsys.readouterr().out
    assert cli_main(["exercises", "check", "--json", ex.name, wrong_answer]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["ok"] is False and verdict["exercise"] == ex.stem and verdict["hidden_run"] is False
    # bad input: one line naming it, exit 2
    assert cli_main(["exercises", "check", "no-such-exercise", str(solution(ex))]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'no-such-exercise'" in err
    missing = str(tmp_path / "missing.py")
    assert cli_main(["exercises", "check", ex.name, missing]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing.py" in err
    assert cli_main(["exercises", "check", ex.name, wrong_answer, "--timeout", "-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--timeout" in err
    # the same through python -m refattn.exercises's main
    assert exercises_main(["check", ex.name, missing]) == 2
    capsys.readouterr()


@pytest.mark.slow
@pytest.mark.parametrize("text, expect", [
    ("def softmax_vjp(s, u):\n    return 1 / 0\n", "raised ZeroDivisionError"),
    ("import numpy as np\n", "defines no function softmax_vjp(s, u)"),
    ("softmax_vjp = 3\n", "defines no function softmax_vjp(s, u)"),
    ("def softmax_vjp(s, u) return s\n", "raised SyntaxError"),
    ("raise RuntimeError('boom')\n", "raised RuntimeError: boom"),
    ("def softmax_vjp(s, u):\n    return s[:1]\n", "expected shape"),
    ("def softmax_vjp(s, u):\n    return 'ds'\n", "expected an array of real numbers, got a str"),
    ("def softmax_vjp(s, u):\n    return {'s': s}\n", "expected an array of real numbers, got a dict"),
    ("def softmax_vjp(s, u):\n    return s * 1j\n", "expected real numbers, got complex ones"),
])
def test_broken_answers_are_wrong_not_bad_input(tmp_path, capsys, text, expect):
    path = write(tmp_path, text)
    assert cli_main(["exercises", "check", "softmax-vjp", path]) == 1
    out = capsys.readouterr().out
    assert expect in out and "grader error" not in out


@pytest.mark.slow
def test_number_answer_must_be_a_number(tmp_path):
    verdict = grade("closure-witness", write(tmp_path, "ANSWER = 'six'\n"))
    assert not verdict.ok and "finite real number" in str(verdict)
    verdict = grade("closure-witness", write(tmp_path, "ANSWER = 6.0\n"))
    assert not verdict.ok and "is not the smallest shift" in str(verdict) and "too small" not in str(verdict)


@pytest.mark.slow
def test_graders_do_not_need_the_answer_inside_the_package(tmp_path):
    """A copy of a model solution in an unrelated folder, with an unusual file name, grades
    the same: the grader reads the file from its path, not from the package."""
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


@pytest.mark.slow
def test_tanhmax_ell_accurate_near_zero_is_right(tmp_path):
    """An ell more accurate than the library's near 0 (log1p(2 sinh^2(s/2)): no cancellation)
    passes: the tolerance allows the reference's own rounding, absolute 1e-15."""
    text = WRONG["tanhmax-derivatives"][1].replace(
        "return np.log(np.cosh(s))",
        "a = np.abs(s)\n                return np.where(a < 1, np.log1p(2 * np.sinh(a / 2) ** 2), "
        "a + np.log1p(np.exp(-2 * a)) - np.log(2.0))")
    verdict = grade("tanhmax-derivatives", write(tmp_path, text), hidden=True)
    assert verdict.ok, str(verdict)
    from refattn import activation

    s = np.array([-1e-8])  # log cosh s = 5e-17; the library's cancelling sum gives 1.1e-16
    lib, accurate = activation("tanhmax").ell(s), np.log1p(2 * np.sinh(s / 2) ** 2)
    assert abs(lib - accurate)[0] > 1e-12 * abs(accurate)[0]  # relative 1e-12 alone would fail this answer


#: Exercise 07's required cases, each of one property: finite where cosh and sinh overflow.
FINITE_07 = ("finite for scores beyond 710 (required)", "finite for scores between 711 and 740 (required)")

#: The right formulas computed the naive way, each with the cases it must fail: exactly the
#: cases whose scores or shifts leave float64's range (the statements say which).
NAIVE = {
    "cosh as written": ("tanhmax-velocity", """
        import numpy as np
        def velocity(s, o, c, delta_I):
            C = np.sum(np.cosh(s), -1, keepdims=True)
            wt, wh = np.cosh(s) / C, np.sinh(s) / C
            return -delta_I * (wt * o - wh * np.sum(wh * o, -1, keepdims=True)) * c[:, None]
        """, {"four instances, one with scores beyond 710 (cosh overflows)",
              "scores between 711 and 740, of both signs", *FINITE_07}),
    "softmax of log cosh without the max": ("tanhmax-velocity", """
        import math
        import numpy as np
        def velocity(s, o, c, delta_I):
            a = np.abs(s)
            e = np.exp(a + np.log1p(np.exp(-2.0 * a)) - math.log(2.0))
            wt = e / np.sum(e, -1, keepdims=True)
            wh = np.tanh(s) * wt
            return -delta_I * (wt * o - wh * np.sum(wh * o, -1, keepdims=True)) * c[:, None]
        """, {"four instances, one with scores beyond 710 (cosh overflows)",
              "scores between 711 and 740, of both signs", *FINITE_07}),
    "A, B and e^(-2c) as written": ("closure-gap", """
        import numpy as np
        def gap(s, c):
            q = np.exp(-2.0 * c) * np.sum(np.exp(-s)) / np.sum(np.exp(s))
            return 2.0 * q / (1.0 + q)
        """, {"row 1, shifts from -400 to 300", "row 2, shifts from -400 to 300", "row 3, shifts from -400 to 300",
              "scores beyond 710 (e^s overflows), shifts from -5 to 300", "scores beyond 710, of both signs",
              "finite for scores beyond 710 (required)", "finite for scores beyond 710 of both signs (required)"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("key", list(NAIVE))
def test_a_naive_answer_fails_the_overflow_cases(key, tmp_path):
    """Exercises 07 and 09 promise accuracy where the textbook formula overflows: a naive answer,
    right wherever float64 holds its intermediates, fails exactly the cases that leave that range
    (public ones among them, so a student sees it before submitting)."""
    name, text, overflowing = NAIVE[key]
    verdict = grade(name, write(tmp_path, text), hidden=True)
    assert not verdict.ok
    failed = {c["kind"] for c in verdict.cases if not c["ok"]}
    assert failed == overflowing, str(verdict)
    assert verdict.group(False)[0] < verdict.group(False)[1]


@pytest.mark.parametrize("factor, hint", [(2.0, "2 times"), (0.5, "0.5 times"), (-1.0, None), (1.0 + 1e-7, None),
                                          (1.0 - 1e-5, None), (1e-9, None), (0.0, None)])
def test_constant_factor_hint_only_for_a_real_factor(factor, hint):
    """The hint "your result is c times the right one" fires for a real factor (2, 1/2); not for a
    result a hair off 1 (it would read "1 times the right one"), not for a nearly-zero one, and
    a factor of -1 is the sign hint instead."""
    from refattn.exercises.judge import Report

    e = np.linspace(0.5, 2.0, 12).reshape(3, 4)
    report = Report()
    assert not report.close("x", factor * e, e, rtol=1e-10)
    factor_hints = [h for h in report.hints if "constant factor" in h]
    if hint is None:
        assert not factor_hints, report.hints
    else:
        assert len(factor_hints) == 1 and f"your result is {hint} the right one" in factor_hints[0]
    assert any("sign is flipped" in h for h in report.hints) == (factor == -1.0)


def test_closure_witness_comment_states_the_answer():
    """The value written beside exercise 14's ANSWER is the smallest shift, to its digits."""
    from refattn.exercises.graders import closure_shift
    from refattn.exercises.export import solution_source

    shown = re.findall(r"ANSWER = .*#\s*([0-9.]+)\.\.\.", solution_source(exercise(14)))
    assert len(shown) == 1
    digits = len(shown[0].split(".")[1])
    assert float(shown[0]) == math.floor(closure_shift() * 10 ** digits) / 10 ** digits


def test_the_tolerance_is_the_rounding_bound_of_each_entry():
    """:func:`tolerance` is derivation 22's bound, 2 u_r (ROUNDINGS + terms + 2 argument) size plus the
    underflow's absolute error, entry by entry: an entry whose terms are large (a cancellation, as in
    softmax's VJP at saturated rows) gets the tolerance of its terms, not of its own size."""
    u_r = 2.0 ** -53
    assert tolerance(1.0) == pytest.approx(2 * u_r * (ROUNDINGS + 1), rel=1e-12)
    got = tolerance(np.array([1.0, 2.0, 0.0]), terms=7, argument=np.array([0.0, 900.0, 0.0]))
    eta = 2 * (ROUNDINGS + 7) * 2.0 ** -1074
    assert got == pytest.approx([2 * u_r * (ROUNDINGS + 7) + eta, 2 * u_r * (ROUNDINGS + 7 + 1800) * 2 + eta, eta],
                                rel=1e-12)
    assert tolerance(1.0, dtype=np.float32) > 1e8 * tolerance(1.0)  # float32's roundoff, 2^-24


#: The hidden seeds every correct answer of ``right_answers.py`` (and every model solution) is graded on,
#: the public cases drawn from each of them too (as an autograder does), and how often the long cases come
#: along (each is a few megabytes to judge; their rounding is that of the short ones, at more terms).
SEEDS, LONG_EVERY = range(50), 25


def _over_seeds(ex):
    """Every case of ``ex`` over :data:`SEEDS`, as one group, their expectations computed once."""
    cases = list(ex.cases(0))
    for seed in SEEDS:
        cases += [c for c in ex.cases(seed, seed) if c.form is None or seed % LONG_EVERY == 0]
    return [dataclasses.replace(c, hidden=False, expect=expectations(c)) for c in cases]


@pytest.mark.slow
def test_correct_answers_written_otherwise_pass_on_every_seed(tmp_path):
    """Several algebraically different correct answers per exercise (``right_answers.py``: other
    evaluation orders, log-sum-exp forms, a Jacobian built and applied, a loop over rows, another root
    finder) and the model solutions, graded on every case of 50 seeds (public and hidden, drawn per
    seed as an autograder draws them): none fails, so no tolerance is narrower than a correct
    answer's rounding. The answers run in the grader's own child processes, one per answer. Exercise
    15's answers are verdicts (whole numbers) on candidate VJPs: its model solution runs here, and the
    checks that other ways of writing it lose cases are tests/exercises/test_gradient_check.py's."""
    prepared, names = [], []
    for ex in EXERCISES:
        cases = _over_seeds(ex)
        answers = [("the model solution", solution(ex).read_text())] + RIGHT.get(ex.name, [])
        for i, (why, text) in enumerate(answers):
            path = write(tmp_path, text, f"{ex.stem}-{i}.py")
            prepared.append((ex, path, Path(path).read_text(), cases))
            names.append(f"{ex.stem} ({why})")
    assert all(len(RIGHT[ex.name]) >= 2 for ex in EXERCISES if ex.name != "gradient-check")
    iso = isolation.prepare(600, level="python")
    try:
        runs = run_groups(prepared, iso=iso, guard=forbidden_places(), timeout=600.0)
    finally:
        iso.close()
    failed = []
    for (ex, path, _, cases), run, name in zip(prepared, runs, names):
        verdict = judge_answer(ex, path, cases, run, False)
        assert len(verdict.cases) == len(cases) or not verdict.cases, name
        if not verdict.ok:
            failed.append(f"{name}: " + "; ".join(f"{c.case}: {c.message}" for c in verdict.checks if not c.ok)[:3000])
    assert not failed, "\n".join(failed)


def _points(verdict, config=None):
    """The share of an exercise's points an autograder gives ``verdict`` (its default scoring)."""
    if not verdict.cases:
        return 0.0
    return sum(group_score(verdict, hidden, 0.5, config or {})[0] for hidden in (False, True))


@pytest.mark.slow
@pytest.mark.parametrize("name, factor, hint", [("tanhmax-velocity", -1.0, "the sign is flipped"),
                                                ("softmax-vjp", 2.0, "your result is 2 times the right one")])
def test_a_wrong_sign_or_factor_is_named_and_fails_no_required_case(name, factor, hint, tmp_path):
    """A required case checks its property alone (finite where an exponential overflows; the long row
    within the time limit, up to a constant factor): a flipped sign or a factor fails the other cases,
    with the hint that names it, and the group's line never blames a required case."""
    text = solution(exercise(name)).read_text().replace("### END SOLUTION", "### END SOLUTION")
    fn = exercise(name).functions[0]
    text += f"\n\n_right = {fn}\n\n\ndef {fn}(*args):\n    return {factor!r} * _right(*args)\n"
    verdict = grade(name, write(tmp_path, text), hidden=True, public_seed=3)
    assert not verdict.ok and any(hint in h for h in verdict.hints), str(verdict)
    assert all(c["ok"] for c in verdict.cases if c["required"]), verdict.cases
    assert any(c["required"] for c in verdict.cases)
    for hidden in (False, True):
        score, why = group_score(verdict, hidden, 1.0, {})
        # a case whose right value is 0 (softmax's VJP on rows of one entry) is right at any factor
        assert score <= 0.2 and "required" not in why, (hidden, score, why)


def _inputs(case):
    """Everything a case hands the answer, as a tuple of numbers and seeds (arrays flattened)."""
    from refattn.exercises.judge import Drawn, Table

    out = []

    def add(x):
        if isinstance(x, Drawn):
            out.append(("drawn", x.seed))
        elif isinstance(x, Table):
            add(x.s)
        elif isinstance(x, dict):
            for v in x.values():
                add(v)
        elif isinstance(x, (tuple, list)):
            for v in x:
                add(v)
        elif isinstance(x, str):  # a name (exercise 15's activation): not a drawn input
            return
        elif x is not None:
            out.append(tuple(np.ravel(np.asarray(x, dtype=np.float64)).tolist()))
    for c in case.calls:
        add(c.args)
    return tuple(out)


@pytest.mark.parametrize("ex", [ex for ex in EXERCISES if ex.kind == "function"], ids=lambda ex: ex.name)
def test_every_case_is_drawn_again_for_each_submission(ex):
    """Public cases drawn from two submissions' seeds share no case's inputs (so no table of the
    handout's public values, exercise 02's edge scores included, answers an autograder's visible
    group), and neither do hidden cases drawn from two hidden seeds."""
    for hidden, (a, b) in ((False, (ex.cases(0, 1), ex.cases(0, 2))), (True, (ex.cases(1), ex.cases(2)))):
        a, b = ([c for c in cs if c.hidden == hidden] for cs in (a, b))
        assert len(a) == len(b)  # the same cases (a public kind may name its drawn input: 11's angles)
        same = [x.kind for x, y in zip(a, b) if _inputs(x) == _inputs(y)]
        assert not same, f"{'hidden' if hidden else 'public'} cases with the same inputs for two seeds: {same}"
    fixed = ex.cases(0)
    assert [_inputs(c) for c in fixed if not c.hidden] == [_inputs(c) for c in ex.cases(5) if not c.hidden]
