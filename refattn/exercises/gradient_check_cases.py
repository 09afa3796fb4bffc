"""Exercise 15's grader: a student's gradient check, judged on right and on planted-wrong VJPs.

The answer's ``gradient_check(name, s, jac, seed)`` checks the candidate
VJP ``u -> u @ jac`` of one activation's weights at the row ``s`` by central
differences with a random cotangent (derivation 22), and returns its
verdict: :data:`AGREES`, :data:`BUG` or :data:`SPIKE` (the disagreement of a
jump, derivation 01, section 4.1, and derivation 22, section 6.3). Each case
hands it one candidate: the library's Jacobian
(:meth:`refattn.core.activations.Activation.jacobian`) or that Jacobian with
one planted mistake, each large enough that a check whose step and
tolerance follow derivation 22 (an error of about :math:`10^{-10}` of the
cotangent's size) catches it for every cotangent but a set of probability
below :math:`10^{-4}`, and each of a kind that a check with a guessed
tolerance, the all-ones cotangent or no look at a jump gets wrong. The
answer's ``weights(name, s)`` is compared with the library's forward pass.
"""

from __future__ import annotations

import numpy as np

from ..core.activations import activation
from .judge import Case, Expect, call, tolerance

__all__ = ["AGREES", "BUG", "SPIKE", "ACTIVATIONS", "gradient_check_cases"]

#: The verdicts a check returns: the VJP agrees; it is wrong (a bug); the disagreement is a jump's spike.
AGREES, BUG, SPIKE = 0, 1, 2

#: The activations the statement defines (derivation 01, sections 3.1-3.3).
ACTIVATIONS = ("softmax", "tanhmax", "signexp")

#: What a wrong verdict says, by (the right verdict, the side the answer's lies on).
_WRONG = {
    (AGREES, "high"): "your check rejects a right VJP: its tolerance is below the error central differences can "
                      "have at its step (Eqs. 22.C3 and 22.C5), or its step is far from the optimum (Eq. 22.C6)",
    (BUG, "low"): "your check passes a wrong VJP",
    (BUG, "high"): "your check calls a bug the spike of a jump: at a smooth point the difference quotient does not "
                   "change when the step doubles (derivation 22, section 6.3)",
    (SPIKE, "low"): "at a score of exactly 0 the difference quotient is the spike of signexp's jump, u_k p_k / h "
                    "(derivation 01, section 4.1), which no VJP can match: report it as the spike (2), found by "
                    "differencing at 2h too, not as a bug or as agreement",
}

#: Why a check passes the wrong VJP of a planted mistake, where the mistake says it.
_WHY = {
    "column sums": "its columns sum to zero, so the all-ones cotangent cannot see it (derivation 01, 'Why the "
                   "cotangent must be random'); a random one can",
    "factor": "a relative 1e-7 is caught only by the tolerance of derivation 22 at the best step (about 1e-10 of "
              "the values), not by a guessed one such as gradcheck's default rtol = 1e-6",
    "sign": "a flipped sign moves an entry of the VJP by twice its size, which a check misses only where the "
            "entry is 0, as all of softmax's are at the all-ones cotangent (derivation 01, 'Why the cotangent must "
            "be random')",
}


def _verdict_case(kind, name, s, jac, seed, right, hidden, planted=None):
    """One call of ``gradient_check`` on the candidate ``jac``, whose right verdict is ``right``."""
    label = f"gradient_check({name!r}, s, jac, seed={seed})" if not hidden else "gradient_check(name, s, jac, seed)"
    other = "the verdict must be 0 (agrees), 1 (a bug) or 2 (the spike of a jump)"
    low, high = _WRONG.get((right, "low"), other), _WRONG.get((right, "high"), other)
    if right == BUG and planted in _WHY and not (planted == "sign" and name != "softmax"):
        low = f"{low}: {_WHY[planted]}"
    what = {AGREES: "agrees (0)", BUG: "a bug (1)", SPIKE: "the spike of a jump (2)"}[right]
    return Case(kind, (call("gradient_check", name, s, jac, seed),),
                lambda: [Expect("range", label, (0,), np.array([right, right], dtype=np.float64), low=low, high=high,
                                passed=f"{label}: {what}, as it must be")], hidden)


def _row(rng, n, low=0.05):
    """Scores in [-3, 3] of both signs, none within ``low`` of 0 (signexp's jump would lie inside the steps)."""
    s = rng.uniform(-3.0, 3.0, n)
    s = np.where(np.abs(s) < low, np.copysign(low, s) + s, s)
    s[-1] = -np.sign(s[0]) * abs(s[-1])  # signed weights differ from p only where the signs are mixed
    return s


def _one_sided(s, k):
    """signexp's Jacobian column ``k`` as ``s_k -> 0+`` (derivation 01, section 4.1): another convention."""
    p = np.exp(np.abs(s)) / np.sum(np.exp(np.abs(s)))
    col = -np.sign(s) * p * p[k]  # -phi_j p_k off the diagonal
    col[k] = p[k] * (1.0 - p[k])  # the ordinary derivative on either side of the jump
    return col


def _planted(rng, name, s, kind):
    """The library's Jacobian of ``name`` at ``s`` with the mistake ``kind`` planted (``None``: none)."""
    act = activation(name)
    jac = act.jacobian(s)
    n = s.size
    i = int(np.argmax(np.abs(jac).max(axis=0)))  # a column that matters
    if kind == "sign":
        jac[:, i] = -jac[:, i]
    elif kind == "softmax formula":  # diag(p) - p p^T for every activation: right only where rho = 1
        p = act.p(s)
        jac = np.diag(p) - np.outer(p, p)
    elif kind == "column sums":  # an error with zero column sums: the all-ones cotangent cannot see it
        a, b = rng.choice(n, 2, replace=False)
        eps = 1e-3 * np.abs(jac).max()
        jac[a, i] += eps
        jac[b, i] -= eps
    elif kind == "factor":  # a constant rounded to seven digits: every entry off by a relative 1e-7
        jac = jac * (1.0 + 1e-7)
    elif kind == "at zero":  # right everywhere but in the zero score's column: the one-sided limit there
        jac[:, 0] = _one_sided(s, 0)
    elif kind == "and a bug":  # the zero score's column as the library has it, and a sign flipped elsewhere
        j = 1 + int(np.argmax(np.abs(jac[:, 1:]).max(axis=0)))
        jac[:, j] = -jac[:, j]
    return jac


#: The public cases: (kind, activation, planted mistake, zero the first score, the right verdict).
_PUBLIC = (
    ("softmax, the right VJP", "softmax", None, False, AGREES),
    ("tanhmax, the right VJP", "tanhmax", None, False, AGREES),
    ("signexp away from 0, the right VJP", "signexp", None, False, AGREES),
    ("softmax, one column's sign flipped", "softmax", "sign", False, BUG),
    ("tanhmax with softmax's Jacobian diag(p) - p p^T", "tanhmax", "softmax formula", False, BUG),
    ("softmax, an error the all-ones cotangent cannot see", "softmax", "column sums", False, BUG),
    ("tanhmax, every entry off by a relative 1e-7", "tanhmax", "factor", False, BUG),
    ("signexp at a score of exactly 0, the library's VJP", "signexp", None, True, SPIKE),
    ("signexp at a score of exactly 0, a VJP wrong only in that score's column", "signexp", "at zero", True, SPIKE),
    ("signexp at a score of exactly 0, and a sign flipped in another column", "signexp", "and a bug", True, BUG),
)

#: The hidden cases: the same kinds on other rows, shapes and cotangents, and the mistakes on other activations.
_HIDDEN = _PUBLIC + (
    ("signexp, one column's sign flipped", "signexp", "sign", False, BUG),
    ("signexp, every entry off by a relative 1e-7", "signexp", "factor", False, BUG),
    ("tanhmax, an error the all-ones cotangent cannot see", "tanhmax", "column sums", False, BUG),
    ("signexp with softmax's Jacobian diag(p) - p p^T", "signexp", "softmax formula", False, BUG),
)


def _cases(rng, table, hidden, sizes):
    """One verdict case per row of ``table``, on a row of a length drawn from ``sizes`` and a drawn seed."""
    cases = []
    for kind, name, planted, zero, right in table:
        s = _row(rng, int(rng.integers(*sizes)))
        if zero:
            s[0] = 0.0
        seed = int(rng.integers(1000))
        cases.append(_verdict_case(kind, name, s, _planted(rng, name, s, planted), seed, right, hidden, planted))
    return cases


def _weights_case(rng, hidden):
    s = _row(rng, 6)
    s[2] = 0.0  # signexp's sign(0) = 0
    calls = tuple(call("weights", name, s) for name in ACTIVATIONS)

    def expect():
        out = []
        for k, name in enumerate(ACTIVATIONS):
            act = activation(name)
            ell = act.ell(s)  # the weights are rho softmax(ell): exponentials of arguments up to |ell|
            p = activation("softmax")(ell)  # the size of each weight's terms (|rho| <= 1 for the three)
            out.append(Expect("close", f"weights({name!r}, s)", (k,), act(s),
                              atol=tolerance(p, terms=s.size, argument=np.abs(ell).max()),
                              inputs=None if hidden else {"s": s}))
        return out

    return Case("weights(name, s) for the three activations, one score exactly 0", calls, expect, hidden, 1)


def gradient_check_cases(hidden_seed, public_seed=None):
    """The cases of exercise 15: the forward, then one verdict per candidate VJP (public, then hidden)."""
    rng = np.random.default_rng(1015 if public_seed is None else [1015, int(public_seed)])
    cases = [_weights_case(rng, False)] + _cases(rng, _PUBLIC, False, (4, 7))
    h = np.random.default_rng([15, int(hidden_seed)])
    return cases + [_weights_case(h, True)] + _cases(h, _HIDDEN, True, (3, 9))
