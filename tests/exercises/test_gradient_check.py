"""Exercise 15 (build a gradient check): its planted candidates are what their kinds say, the model
solution's verdicts are right on every case, and each plausible wrong check loses a case.

The checks are called in this process (the sandboxed grading of the model solution and of a wrong
answer is in ``test_exercises.py`` and ``test_answer_key.py``), on the public cases and the hidden
ones of several seeds: a verdict that depended on a lucky cotangent would show here.
"""

from __future__ import annotations

import importlib.util
import pathlib
import types

import numpy as np
import pytest

from refattn.core.activations import activation
from refattn.exercises import exercise
from refattn.exercises.gradient_check_cases import AGREES, BUG, SPIKE, _one_sided, _planted, gradient_check_cases

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOLUTION = (ROOT / exercise("gradient-check").solution).read_text(encoding="utf-8")


def _module(replace=()):
    """The model solution, with each ``(old, new)`` of ``replace`` substituted (a wrong check)."""
    text = SOLUTION
    for old, new in replace:
        assert old in text, old
        text = text.replace(old, new)
    module = types.ModuleType("answer")
    exec(compile(text, "answer.py", "exec"), module.__dict__)  # noqa: S102 - the repository's own file
    return module


def _verdicts(module, seeds):
    """``[(kind, right verdict, the module's)]`` over the public cases and the hidden ones of ``seeds``."""
    out = []
    for seed in seeds:
        cases = gradient_check_cases(seed)
        for case in cases if seed == seeds[0] else [c for c in cases if c.hidden]:
            if case.calls[0].fn != "gradient_check":
                continue
            right = int(case.expect()[0].expected[0])
            out.append((case.kind, right, module.gradient_check(*case.calls[0].args)))
    return out


_STEP = "h = (3.0 * KAPPA * U * S / M) ** (1.0 / 3.0)"
_TOL = "tol = M * taken**2 / 6.0 + KAPPA * U * size / taken"

#: Plausible wrong checks: what each does, and the substitution that makes it from the model solution.
WRONG_CHECKS = {
    "the all-ones cotangent": [("u = np.random.default_rng(seed).standard_normal(s.shape)", "u = np.ones(s.shape)")],
    "gradcheck's default step and rtol": [(_STEP, "h = 1e-6"),
                                          (_TOL, "tol = 1e-6 * np.max(np.abs(a)) + KAPPA * U * size / taken")],
    "a step of 1e-10 (rounding swamps it)": [(_STEP, "h = 1e-10")],
    "a step of 1e-3, the rounding bound alone": [(_STEP, "h = 1e-3"), (_TOL, "tol = KAPPA * U * size / taken")],
    "a guessed tolerance of 1e-4": [(_TOL, "tol = 1e-4")],
    "no look at the jump": [("jump = abs(d2 - d) > abs(d - a[i]) / 4.0", "jump = False")],
}


def test_the_model_solution_gives_every_right_verdict_over_several_seeds():
    got = _verdicts(_module(), [0, 1, 2, 3, 4])
    wrong = [(kind, right, v) for kind, right, v in got if v != right]
    assert not wrong, wrong
    assert {right for _, right, _ in got} == {AGREES, BUG, SPIKE}


@pytest.mark.slow  # attacks the grader
@pytest.mark.parametrize("what", list(WRONG_CHECKS))
def test_a_plausible_wrong_check_loses_a_case(what):
    got = _verdicts(_module(WRONG_CHECKS[what]), [0, 1])
    assert any(v != right for _, right, v in got), f"{what}: every verdict right"


def test_the_planted_mistakes_are_what_their_kinds_say():
    rng = np.random.default_rng(0)
    s = np.array([0.4, -1.3, 2.2, 0.9, -0.6])
    jac = activation("softmax").jacobian(s)
    ones = np.ones_like(s)
    sums = _planted(rng, "softmax", s, "column sums")
    assert np.allclose(ones @ sums, ones @ jac, rtol=0, atol=1e-15) and np.abs(sums - jac).max() > 1e-5
    assert np.allclose(ones @ _planted(rng, "softmax", s, "sign"), 0.0, atol=1e-15)  # softmax's VJP at 1 is 0
    factor = _planted(rng, "tanhmax", s, "factor")
    assert np.allclose(factor, activation("tanhmax").jacobian(s) * (1 + 1e-7), rtol=1e-15, atol=0)
    z = s.copy()
    z[0] = 0.0
    library = activation("signexp").jacobian(z)
    at_zero = _planted(rng, "signexp", z, "at zero")
    assert np.array_equal(at_zero[:, 1:], library[:, 1:]) and not np.allclose(at_zero[:, 0], library[:, 0])


def test_the_one_sided_column_is_the_limit_from_above():
    """signexp's Jacobian column at s_k -> 0+ (derivation 01, section 4.1) against a difference on that side."""
    sx = activation("signexp")
    s = np.array([0.0, 0.7, -1.2, 0.3])
    e, d = np.eye(4)[0], 1e-6
    one_sided = (sx(s + 2 * d * e) - sx(s + d * e)) / d  # both points above the jump: no spike
    assert np.allclose(_one_sided(s, 0), one_sided, rtol=0, atol=1e-5)


@pytest.mark.slow  # checks a number the statement gives
@pytest.mark.parametrize("name", ["softmax", "tanhmax", "signexp"])
def test_the_statements_bound_on_the_third_derivative_holds(name):
    """|F'''| <= 0.4 max|u| along every coordinate for scores in [-3, 3] (the statement's M), on 3,000 random rows
    of 3 to 8 scores, F''' by the five-point difference (F(2h) - 2F(h) + 2F(-h) - F(-2h)) / (2h^3), h = 0.01."""
    act, rng, h = activation(name), np.random.default_rng(15), 1e-2
    worst = 0.0
    for _ in range(3000):
        n = int(rng.integers(3, 9))
        s, u, i = rng.uniform(-3.0, 3.0, n), rng.standard_normal(n), int(rng.integers(n))
        if name == "signexp" and np.min(np.abs(s)) < 3 * h:  # the jump inside the stencil: not a smooth point
            continue
        e = np.eye(n)[i]
        F = [u @ act(s + k * h * e) for k in (2, 1, -1, -2)]
        worst = max(worst, abs(F[0] - 2 * F[1] + 2 * F[2] - F[3]) / (2 * h**3) / np.max(np.abs(u)))
    # the stencil's own error is h^2 F^(5)/4, about 1e-4 of these values: far inside the margin to 0.4
    assert worst <= 0.4, worst
