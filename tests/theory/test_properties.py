"""Tests for refattn.theory.properties: the four properties of TanhMax section 4.

Each computed property is compared with an independent re-measurement written
differently here (autograd derivatives at random points instead of steps on
a grid, finite perturbations instead of the Jacobian, a closed-form log-softmax
rank), with the closed-form expectations argued in
``derivations/06-four-properties.md``, and with the paper's Table 3 as printed
in TanhMax. A monkeypatched g shows that the table is computed, not stored.
"""

import json
import pathlib
import re

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import elementwise_grad, jacobian as ag_jacobian
from hypothesis import given, settings, strategies as st

from refattn import ACTIVATIONS, activation
from refattn.studies import four_properties
from refattn.theory import properties as P

from tests.support import RTOL_AUTOGRAD, random_scores

SEEDS = pathlib.Path(__file__).resolve().parents[3] / "shared" / "seeds"


@pytest.fixture(scope="module")
def result():
    return four_properties.run(four_properties.Settings(seed=0))


def _computed(result, name, prop):
    return result["computed"][name][prop]


# --------------------------------------------------------------------------
# Each property against an independent re-measurement
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_monotonicity_matches_the_sign_of_autograds_derivative(name, result):
    """Non-decreasing (up to jumps, which are upward for signexp) iff g' >= 0
    everywhere; g' from autograd differentiating g at random points."""
    act = activation(name)
    s = np.random.default_rng(1).uniform(-8.0, 8.0, 3000)  # (3000,), no exact 0
    dg = elementwise_grad(act.g)(s)  # (3000,)
    np.testing.assert_allclose(dg, act.dg(s), rtol=1e-12, atol=0)  # the library's dg agrees
    assert _computed(result, name, "monotonicity") == bool(np.all(dg >= 0))


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_origin_symmetry_matches_random_points(name, result):
    act = activation(name)
    s = np.random.default_rng(2).uniform(-30.0, 30.0, 500)  # (500,)
    odd = np.allclose(act.g(-s), -act.g(s), rtol=1e-13, atol=0)
    assert _computed(result, name, "origin_symmetry") == odd


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_log_nonlinearity_matches_a_non_constant_log_derivative(name, result):
    """log|g| is affine on {g != 0} iff its derivative is one constant there
    (for the registered activations, whose zero set is a point or a half-line);
    the derivative from autograd at random points."""
    act = activation(name)
    s = np.random.default_rng(3).uniform(-8.0, 8.0, 400)  # (400,)
    s = s[act.g(s) != 0]  # log|g| finite
    dlog = elementwise_grad(lambda x: anp.log(anp.abs(act.g(x))))(s)
    spread = np.max(dlog) - np.min(dlog)
    assert _computed(result, name, "log_nonlinearity") == bool(spread > 1e-6 * max(1.0, np.max(np.abs(dlog))))


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_normalisation_matches_a_finite_perturbation_of_another_score(name, result):
    """Move one score s_k by 1e-3 and watch the other weights: they move iff
    the activation normalises by its context."""
    act = activation(name)
    s = np.array([0.9, -1.3, 0.4, 2.1, -0.6])  # (5,) both signs, no 0
    moved = s.copy()
    moved[3] += 1e-3
    change = np.abs(act(moved) - act(s))[[0, 1, 2, 4]]  # other tokens only
    assert _computed(result, name, "contextual_normalisation") == bool(np.max(change) > 1e-9)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_jacobian_used_for_normalisation_matches_autograd(name):
    act = activation(name)
    s = random_scores(name, (6,), np.random.default_rng(4))
    J_auto = ag_jacobian(act)(s)  # (6, 6)
    np.testing.assert_allclose(act.jacobian(s), J_auto, rtol=RTOL_AUTOGRAD, atol=1e-14)


def test_unnormalised_rows_have_exactly_zero_off_diagonal(result):
    for name in ("linear", "relu"):
        ev = result["activations"][name]["contextual_normalisation"]["evidence"]
        assert ev["max_abs_offdiag"] == 0.0 and ev["max_abs_diag"] > 0


# --------------------------------------------------------------------------
# The rank measurement (Kanai et al.'s bottleneck)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("n,d", [(12, 3), (8, 2), (10, 5)])
def test_softmax_rank_is_d_plus_1_as_the_closed_form_says(n, d):
    """log softmax(W h) = W h - lse(W h) 1 lies in span(W, 1): rank exactly
    d + 1 for generic W and h; checked on an independent log-softmax."""
    rng = np.random.default_rng(5)
    Z = rng.standard_normal((100, d)) @ rng.standard_normal((n, d)).T  # (100, n)
    M = Z - np.log(np.sum(np.exp(Z), axis=1, keepdims=True))  # (100, n) log softmax
    assert np.linalg.matrix_rank(M) == d + 1
    br = P.bottleneck_rank("softmax", n=n, d=d, seed=0)
    assert br["bound"] == d + 1 and not br["exceeds_bound"]
    assert [r["rank"] for r in br["regimes"].values()] == [d + 1, d + 1]


def test_rank_measurement_sees_nonlinearity_and_signexps_orthants():
    br = P.bottleneck_rank("tanhmax")
    assert all(r["rank"] > br["bound"] for r in br["regimes"].values())
    assert br["regimes"]["mixed"]["first_beyond_bound"] > 1e-8
    # signexp on positive scores is softmax: log phi = z - lse(z), rank d + 1;
    # only scores of both signs (the kink of |z|) lift it
    se = P.bottleneck_rank("signexp")
    assert se["regimes"]["positive"]["rank"] == se["bound"]
    assert se["regimes"]["mixed"]["rank"] > se["bound"]
    # relu and cosformer have zero weights on mixed-sign scores
    for name in ("relu", "cosformer"):
        mixed = P.bottleneck_rank(name)["regimes"]["mixed"]
        assert not mixed["applicable"] and "zero weight" in mixed["reason"]


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_rank_and_affine_fit_agree(name, result):
    ev = result["activations"][name]["log_nonlinearity"]["evidence"]
    assert ev["bottleneck_rank"]["agrees_with_affine_fit"]


# --------------------------------------------------------------------------
# The table: closed forms, the paper, and proof that it is computed
# --------------------------------------------------------------------------

#: What the closed forms say (derivations/06-four-properties.md, sections 2-5),
#: in the order monotone, log-nonlinear, normalised, origin-symmetric.
CLOSED_FORM = {
    "softmax": (True, False, True, False),     # e^s; log g = s; C = sum e^s; e^-s != -e^s
    "tanhmax": (True, True, True, True),       # sinh: cosh > 0, log|sinh| even, cosh varies, odd
    "signexp": (True, True, True, True),       # jump up at 0; log|g| = |s|; e^|s| varies; odd
    "expressive": (False, True, True, False),  # even, decreasing for s < 0
    "sigsoftmax": (True, True, True, False),   # log g = s - softplus(-s): slopes 2 and 1
    "sigmoid": (True, True, True, False),      # sigmoid(-s) = 1 - sigmoid(s)
    "linear": (True, True, False, True),       # log|s|; h = 1; odd
    "relu": (True, True, False, False),        # flat then s; log s; h = 1
    "cosformer": (True, True, True, False),    # as relu, but C = sum relu(s)
}


@pytest.mark.parametrize("name", sorted(set(CLOSED_FORM) & set(ACTIVATIONS)))
def test_table_matches_the_closed_forms(name, result):
    assert tuple(result["computed"][name][p] for p in P.PROPERTIES) == CLOSED_FORM[name]


def test_evidence_names_the_behaviour(result):
    a = result["activations"]
    assert a["expressive"]["origin_symmetry"]["evidence"]["parity"] == "even"
    assert a["tanhmax"]["origin_symmetry"]["evidence"]["parity"] == "odd"
    assert a["signexp"]["origin_symmetry"]["evidence"]["parity"] == "odd"
    mono = a["expressive"]["monotonicity"]["evidence"]
    assert mono["min_step"] < 0 and max(mono["min_step_between"]) <= 0  # decreasing for s < 0
    # steepest descent where g' = 2s/(1+s^2)^2 is smallest: s = -1/sqrt(3), g' = -3 sqrt(3)/8
    assert abs(np.mean(mono["min_step_between"]) + 1 / np.sqrt(3)) < 0.004
    assert mono["min_step"] == pytest.approx(-3 * np.sqrt(3) / 8 * 0.004, rel=1e-4)
    assert a["signexp"]["monotonicity"]["evidence"]["strict"]
    assert not a["relu"]["monotonicity"]["evidence"]["strict"]  # flat for s < 0
    assert a["softmax"]["log_nonlinearity"]["evidence"]["relative_affine_residual"] < 1e-14
    assert a["softmax"]["log_nonlinearity"]["evidence"]["affine_slope"] == pytest.approx(1.0, abs=1e-12)


def _parse_table3(text):
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("Name\tMonotonicity"))
    header = lines[start].split("\t")[1:]
    assert header == ["Monotonicity", "Log-nonlinearity", "Normalization", "Origin-symmetry"]
    rows = {}
    for ln in lines[start + 1:start + 7]:
        cells = (ln.split("\t") + [""] * 5)[:5]
        rows[cells[0]] = tuple(c.strip() == r"\checkmark" for c in cells[1:])
    return rows


def test_paper_table3_is_the_table_printed_in_tanhmax():
    files = sorted(SEEDS.glob("001_*.txt"))
    if not files:
        pytest.skip("TanhMax's text is not next to this checkout")
    printed = _parse_table3(files[0].read_text())
    ours = {P.PAPER_ROW_NAMES[name]: tuple(row[p] for p in P.PROPERTIES)
            for name, row in P.PAPER_TABLE3.items()}
    assert printed == ours


def test_comparison_is_computed_from_both_tables(result):
    rows = result["comparison"]
    assert len(rows) == 4 * len(P.PAPER_TABLE3)
    for r in rows:
        assert r["paper"] == P.PAPER_TABLE3[r["activation"]][r["property"]]
        assert r["computed"] == result["computed"][r["activation"]][r["property"]]
        assert r["agree"] == (r["paper"] == r["computed"])
    assert result["agree_with_paper"] is True  # every Table 3 row checks out
    unlisted = [n for n in ACTIVATIONS if n not in P.PAPER_TABLE3]
    assert len(result["differences"]) == len(unlisted)
    assert any(d.startswith("signexp: not in Table 3; computed: all four hold")
               for d in result["differences"])


def test_an_even_g_flips_the_computed_table(monkeypatch):
    """Make tanhmax's g even (cosh): monotonicity and origin symmetry must
    fail and disagree with the paper, so nothing is looked up."""
    cls = type(activation("tanhmax"))
    monkeypatch.setattr(cls, "g", lambda self, s: anp.cosh(s))
    res = four_properties.run(four_properties.Settings(seed=0))
    row = res["computed"]["tanhmax"]
    assert not row["monotonicity"] and not row["origin_symmetry"]
    assert res["activations"]["tanhmax"]["origin_symmetry"]["evidence"]["parity"] == "even"
    assert res["agree_with_paper"] is False
    bad = {(r["activation"], r["property"]) for r in res["comparison"] if not r["agree"]}
    assert bad == {("tanhmax", "monotonicity"), ("tanhmax", "origin_symmetry")}
    assert any(d.startswith("tanhmax (TanhMax), monotone") for d in res["differences"])
    assert re.search(r"^tanhmax .*\[✓\]!", four_properties.report(res), re.M)


def test_a_constant_normaliser_flips_normalisation(monkeypatch):
    """Give softmax the Jacobian of an unnormalised map (diagonal only)."""
    cls = type(activation("softmax"))
    monkeypatch.setattr(cls, "jacobian", lambda self, s: np.diag(np.exp(s)) / s.size)
    assert not P.measure_contextual_normalisation("softmax")["holds"]


# --------------------------------------------------------------------------
# Hypothesis: edge cases of the grid-based criteria
# --------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(a=st.floats(-300.0, 300.0), b=st.floats(-300.0, 300.0))
def test_monotone_activations_order_any_pair(a, b):
    """s1 < s2 => g(s1) <= g(s2) (up to rounding) for every activation the
    table calls monotone, for pairs across 0, at 0, and at large |s|."""
    s1, s2 = min(a, b), max(a, b)
    x = np.array([s1, s2])
    for name in ACTIVATIONS:
        if name == "expressive":
            continue  # not monotone: checked in test_evidence_names_the_behaviour
        g1, g2 = activation(name).g(x)
        assert g1 <= g2 + 4 * np.finfo(float).eps * max(abs(g1), abs(g2)), (name, s1, s2)


_side = st.lists(st.integers(1, 5000), min_size=3, max_size=12, unique=True)


@settings(max_examples=60, deadline=None)
@given(neg=_side, pos=_side, with_zero=st.booleans())
def test_verdicts_do_not_depend_on_the_grid(neg, pos, with_zero, result):
    """Any grid with >= 3 scores of each sign, spacing >= 0.01 and |s| <= 50
    gives the default grid's verdicts for the three grid-based properties."""
    pts = [-0.01 * k for k in neg] + [0.01 * k for k in pos] + ([0.0] if with_zero else [])
    grid = np.sort(np.array(pts))
    for name in ACTIVATIONS:
        got = {"monotonicity": P.measure_monotonicity(name, grid=grid)["holds"],
               "log_nonlinearity": P.measure_log_nonlinearity(name, grid=grid, rank=False)["holds"],
               "origin_symmetry": P.measure_origin_symmetry(name, grid=grid)["holds"]}
        assert got == {p: result["computed"][name][p] for p in got}, (name, grid)


def test_float32_grid_gives_the_same_verdicts(result):
    grid = P.default_grid().astype(np.float32)
    for name in ACTIVATIONS:
        m = P.measure(name, grid=grid)
        assert {p: m[p]["holds"] for p in P.PROPERTIES} == result["computed"][name], name
        assert m["origin_symmetry"]["evidence"]["tolerance"] == 4 * np.finfo(np.float32).eps


# --------------------------------------------------------------------------
# Output formats and errors
# --------------------------------------------------------------------------


def test_the_properties_study_is_json_serialisable(result):
    text = json.dumps(result, allow_nan=False)
    assert json.loads(text) == result
    assert set(result["activations"]) == set(ACTIVATIONS)
    assert set(result["criteria"]) == set(P.PROPERTIES)
    for m in result["activations"].values():
        for p in P.PROPERTIES:
            assert isinstance(m[p]["holds"], bool) and m[p]["criterion"] == P.CRITERIA[p]


def test_format_table_has_every_activation(result):
    out = four_properties.report(result)
    for name in ACTIVATIONS:
        assert len(re.findall(rf"^{re.escape(name)}\s", out, re.M)) == 2, name  # marks + evidence
    assert "Every row of Table 3 agrees" in out and "!" not in out.split("\n", 3)[3]


def test_measure_accepts_an_activation_object():
    a = P.measure(activation("signexp"))
    assert set(a) == set(P.PROPERTIES) and all(a[p]["holds"] for p in P.PROPERTIES)


@pytest.mark.parametrize("call,exc,match", [
    (lambda: P.measure("nope"), ValueError, "unknown activation 'nope'"),
    (lambda: P.measure(3), TypeError, "activation"),
    (lambda: P.measure("softmax", grid=np.zeros((3, 3))), ValueError, "grid: expected a 1-D"),
    (lambda: P.measure("softmax", grid=[-1.0, np.nan, 1.0]), ValueError, "grid: expected finite"),
    (lambda: P.measure("softmax", grid=[-3, -2, -1, 3, 2, 1]), ValueError, "strictly increasing"),
    (lambda: P.measure("softmax", grid=np.linspace(0.1, 1, 9)), ValueError, "at least 3 negative"),
    (lambda: P.measure("softmax", grid=["a", "b"]), TypeError, "grid: expected real numbers"),
    (lambda: P.measure("softmax", grid="-1 0 1"), TypeError, "grid"),
    (lambda: P.measure("tanhmax", grid=np.linspace(-1000, 1000, 11)), ValueError,
     "grid: g of 'tanhmax' is not finite"),
    (lambda: P.measure("softmax", seed=-1), ValueError, "seed"),
    (lambda: P.measure("softmax", seed=1.5), TypeError, "seed"),
    (lambda: four_properties.run(four_properties.Settings(seed="0")), TypeError, "seed"),
    (lambda: P.bottleneck_rank("softmax", n=5, d=4), ValueError, "d: expected"),
    (lambda: P.bottleneck_rank("softmax", samples=3), ValueError, "samples"),
    (lambda: P.measure_contextual_normalisation("softmax", n=1), ValueError, "n: expected"),
])
def test_bad_input_is_named(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
