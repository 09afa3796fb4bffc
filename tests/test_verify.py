"""The Verify door end to end: a researcher's activation checked over the range they name.

``refattn check --activation FILE.py[:NAME]`` says what it checked (each
hand-given derivative, its agreement with autograd, the range and the points,
each declared singular score with its one-sided slopes); ``--range LO,HI``
widens the comparison, ``--dtype float32`` checks float32 within a bound from
its rounding, ``--plot DIR`` draws the weights and the gradient beside
softmax's; a declared singular point never excuses a wrong derivative; exit
codes 0 (pass), 1 (a wrong derivative or a failed check), 2 (a file or name
that cannot be used), with ``--json`` printing its object in every case; and a
file's activations are checked one by one.

The researcher's activation here is not the Verify page's: ``g(s) = arctan s``,
``h(s) = 1 + s^2`` (so ``rho = arctan s / (1 + s^2)``, signed, bounded), with
``dg = 1 / (1 + s^2)`` and ``dh = 2 s`` by hand; and a kinked one,
``g = h = 1 + |s|`` (``rho = 1``), whose ``h`` has slopes -1 and +1 at 0.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from refattn import ACTIVATIONS, activation
from refattn.check import FLOAT32_ROUNDOFF, check_activation, float32_rows
from refattn.cli import main
from refattn.custom import DERIVATIVE_RTOL, KINKS, compare_derivative, define_activation, derivative_points

FILE = '''
import autograd.numpy as anp
import refattn

def g(s):
    return anp.arctan(s)

def h(s):
    return 1.0 + s * s

def dg(s):
    return 1.0 / (1.0 + s * s)

def dh(s):
    return 2.0 * s

def kink(s):
    return 1.0 + anp.abs(s)

arctan_max = refattn.define_activation("arctan_max", g, h, dg, dh, regularity="smooth")
kinked = {"g": kink, "h": kink, "dh": anp.sign, "singular_scores": [0.0], "regularity": "kink"}
# a one-sided slope at the declared kink: 1 where autograd's convention for abs is 0
one_sided = {"g": kink, "h": kink, "dh": lambda s: anp.where(s >= 0.0, 1.0, -1.0), "singular_scores": [0.0]}
# the same, undeclared
undeclared = {"g": kink, "h": kink, "dh": lambda s: anp.where(s >= 0.0, 1.0, -1.0)}
# dh = 2 |s|: wrong for every s < 0, right at and above 0
half_wrong = {"g": g, "h": h, "dg": dg, "dh": lambda s: 2.0 * anp.abs(s)}
# dg wrong only for |s| > 15: right over the default range [-10, 10]
far_out = {"g": g, "h": h, "dg": lambda s: anp.where(anp.abs(s) > 15.0, 0.0, dg(s)), "dh": dh}
# a derivative wrong near, but not at, a declared kink
near_kink = {"g": kink, "h": kink, "dh": lambda s: anp.where(anp.abs(s) < 1e-3, 3.8 * s, anp.sign(s)),
             "singular_scores": [0.0]}
# a wrong derivative at the top level: it must not stop the file's other activations being checked
wrong_top = refattn.define_activation("wrong_top", g, h, dh, dh)
'''


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "acts.py"
    p.write_text(FILE)
    return p


def _check(capsys, *argv):
    code = main(["check", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


# --------------------------------------------------------------------------
# What a pass says it checked
# --------------------------------------------------------------------------


def test_a_pass_lists_each_hand_derivative_with_its_agreement_range_and_points(path, capsys):
    code, out, _ = _check(capsys, "--activation", f"{path}:arctan_max")
    assert code == 0 and "all checks passed" in out
    assert "dg               by hand: max relative error" in out and "over 1201 points in [-10, 10]" in out
    code, out, _ = _check(capsys, "--json", "--activation", f"{path}:arctan_max", "--range", "-30,30")
    r = json.loads(out)
    assert code == 0 and r["ok"] and r["range"] == [-30.0, 30.0] and r["given"] == ["dg", "dh"]
    for d in r["derivatives"]:
        assert d["given"] and d["ok"] and d["range"] == [-30.0, 30.0] and d["points"] == 1201
        assert d["max_rel_error"] <= DERIVATIVE_RTOL
    assert [row["name"] for row in r["rows"]] == ["arctan_max (random)", "arctan_max (masked)",
                                                  "arctan_max (range [-30, 30])"]
    assert all(row["ok"] and row["status"] == "ok" for row in r["rows"])


def test_the_range_reaches_a_derivative_wrong_only_far_out(path, capsys):
    assert _check(capsys, "--activation", f"{path}:far_out")[0] == 0  # [-10, 10]: right there
    code, out, _ = _check(capsys, "--json", "--activation", f"{path}:far_out", "--range", "-20,20")
    r = json.loads(out)
    assert code == 1 and not r["ok"]
    dg = r["derivatives"][0]
    assert not dg["ok"] and abs(dg["worst"]["s"]) > 15 and dg["worst"]["rel_error"] > 0.5


def test_a_declared_kink_shows_both_slopes_and_autograds_convention(path, capsys):
    code, out, _ = _check(capsys, "--json", "--activation", f"{path}:kinked")
    r = json.loads(out)
    assert code == 0 and r["ok"]
    (point,) = r["derivatives"][1]["singular"]
    assert point["s"] == 0.0 and point["given"] == point["autograd"] == 0.0
    assert point["left_slope"] == pytest.approx(-1.0, abs=1e-6) and point["right_slope"] == pytest.approx(1.0, abs=1e-6)
    (sing,) = [row for row in r["rows"] if row["singular"]]
    assert sing["ok"] and sing["status"] in ("singular: agrees", "singular: differences excused")


def test_a_wrong_derivative_at_a_declared_kink_is_refused(path, capsys):
    code, out, _ = _check(capsys, "--activation", f"{path}:one_sided")
    assert code == 1 and "check FAILED" in out
    assert "at the declared singular score s = 0.0 it gives 1.0, but autograd's derivative" in out
    assert "one-sided slopes -1 left, 1 right" in out and KINKS in out
    r = json.loads(_check(capsys, "--json", "--activation", f"{path}:one_sided")[1])
    (sing,) = [row for row in r["rows"] if row["singular"]]
    assert not sing["ok"] and sing["status"] == "singular: FAIL vs autograd"


def test_a_wrong_derivative_near_a_declared_kink_is_caught(path, capsys):
    code, out, _ = _check(capsys, "--json", "--activation", f"{path}:near_kink")
    r = json.loads(out)
    assert code == 1 and not r["ok"]
    worst = r["derivatives"][1]["worst"]
    assert 0 < abs(worst["s"]) < 1e-3 and worst["rel_error"] > 0.5


def test_an_undeclared_kink_is_refused_with_its_slopes_and_the_pages_pointer(path, capsys):
    code, out, _ = _check(capsys, "--activation", f"{path}:undeclared")
    assert code == 1
    assert "differs from autograd's derivative of h (kink) only at s = 0.0, where h (kink) has a kink or jump" in out
    assert "slope -1 on the left, 1 on the right" in out and "singular_scores=[0.0]" in out and KINKS in out


def test_the_worst_point_is_where_the_derivative_is_wrong_not_at_a_kink(path, capsys):
    """dh = 2|s|: wrong for s < 0 (relative error 2), and 0 = autograd's value at 0; reported at s < 0."""
    r = json.loads(_check(capsys, "--json", "--activation", f"{path}:half_wrong")[1])
    worst = r["derivatives"][1]["worst"]
    assert worst["s"] < 0 and worst["rel_error"] == pytest.approx(2.0, rel=1e-6)


def test_kink_detection_sets_apart_points_where_f_is_not_smooth():
    x = derivative_points((), 0)
    rep = compare_derivative(lambda s: np.where(s >= 0, 1.0, -1.0), lambda s: np.abs(s) + 0.0, x, role="dh",
                             frole="h")
    assert not rep["ok"] and rep["max_rel_error"] == 0.0  # right wherever h is smooth
    (k,) = rep["kinks"]
    assert k["s"] == 0.0 and k["left_slope"] == pytest.approx(-1) and k["right_slope"] == pytest.approx(1)


# --------------------------------------------------------------------------
# float32
# --------------------------------------------------------------------------


def test_float32_passes_within_its_rounding_bound(path, capsys):
    code, out, _ = _check(capsys, "--json", "--activation", f"{path}:arctan_max", "--dtype", "float32")
    r = json.loads(out)
    assert code == 0 and r["dtype"] == "float32" and len(r["float32"]) == 3
    for row in r["float32"]:
        assert row["ok"] and row["dtype"] == "float32"
        # float32 really ran: its error is rounding's, well above float64's and below the bound
        assert 1e-9 < row["weights"]["max_rel_error"] < 1e-5 and row["weights"]["worst_over_bound"] <= 1


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_the_float32_bound_holds_for_every_builtin(name):
    """The bound is derived, not fitted: every built-in's float32 weights and VJP lie within it."""
    rows = float32_rows(activation(name), np.random.default_rng(1), (-10.0, 10.0))
    assert all(r["ok"] for r in rows), rows


def test_a_formula_that_cancels_in_float32_fails_the_float32_check():
    """g = (1 + s)^2 - 1 - 2 s is s^2 in exact arithmetic, but loses every digit near 0 in float32."""
    sq = define_activation("cancels", lambda s: (1.0 + s) ** 2 - 1.0 - 2.0 * s, lambda s: 1.0 + s * s)
    r = check_activation(sq, dtype="float32", check_range=(-0.01, 0.01))
    assert all(row["ok"] for row in r["rows"])  # float64 is fine
    assert not all(row["ok"] for row in r["float32"]) and not r["ok"]
    assert FLOAT32_ROUNDOFF == 2.0 ** -24


# --------------------------------------------------------------------------
# Exit codes, --json, a file's activations one by one, the picture
# --------------------------------------------------------------------------


@pytest.mark.parametrize("spec, match", [
    ("{tmp}/missing.py:x", "no such file"),
    ("{path}:nope", "defines no 'nope'"),
    ("{tmp}/acts.txt", "expected FILE.py:NAME or FILE.py"),
])
def test_a_file_or_name_that_cannot_be_used_is_exit_2_and_json_still_prints(spec, match, path, tmp_path, capsys):
    spec = spec.format(tmp=tmp_path, path=path)
    code, out, err = _check(capsys, "--json", "--activation", spec)
    assert code == 2 and len(err.strip().splitlines()) == 1 and match in err
    r = json.loads(out)
    assert r["ok"] is False and match in r["error"] and r["activation"] == spec


@pytest.mark.parametrize("argv, option", [
    (["--range", "5,1"], "--range"), (["--range", "1,2,3"], "--range"), (["--range", "a,b"], "--range"),
    (["--range", "0,inf"], "--range"), (["--plot", " "], "--plot"),
])
def test_bad_options_are_one_line_exit_2(argv, option, path, capsys):
    code, _, err = _check(capsys, "--activation", f"{path}:arctan_max", *argv)
    assert code == 2 and err.startswith(f"refattn check: error: {option}:") and len(err.strip().splitlines()) == 1


def test_the_activation_options_need_an_activation(capsys):
    for argv in (["--range", "-1,1"], ["--dtype", "float32"], ["--plot", "figs"]):
        code, _, err = _check(capsys, *argv)
        assert code == 2 and "applies to --activation FILE.py[:NAME] only" in err


def test_a_wrong_derivative_is_exit_1_with_json_on_stdout(path, capsys):
    code, out, err = _check(capsys, "--json", "--activation", f"{path}:wrong_top")
    r = json.loads(out)
    assert code == 1 and err == "" and not r["ok"]
    assert r["refused"].startswith("dg (dh): does not match autograd's derivative of g: worst at s = ")


def test_a_file_is_checked_one_activation_at_a_time(path, capsys):
    code, out, _ = _check(capsys, "--json", "--activation", str(path))
    r = json.loads(out)
    assert code == 1 and r["file"] == str(path)
    verdicts = {a["activation"]: a["ok"] for a in r["activations"]}
    assert verdicts == {"arctan_max": True, "kinked": True, "one_sided": False, "undeclared": False,
                        "half_wrong": False, "far_out": True, "near_kink": False, "wrong_top": False}
    code, out, _ = _check(capsys, "--activation", f"{path}:arctan_max")  # the wrong one hides nothing
    assert code == 0
    assert "3 of 8 activations passed; FAILED: one_sided, undeclared, half_wrong, near_kink, wrong_top" in \
        _check(capsys, "--activation", str(path))[1]


def test_plot_draws_the_weights_and_gradient_beside_softmax(path, tmp_path, capsys):
    folder = tmp_path / "figs"
    code, out, _ = _check(capsys, "--json", "--activation", f"{path}:arctan_max", "--plot", str(folder))
    r = json.loads(out)
    png = folder / "check_arctan_max.png"
    assert code == 0 and r["plot"] == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert not list(folder.glob("*.partial-*"))


def test_plot_says_where_the_activation_is_not_finite(tmp_path):
    """An h that overflows on the far row: the panel says so instead of drawing NaN."""
    from refattn.check import plot_activation  # noqa: PLC0415

    import autograd.numpy as anp  # noqa: PLC0415

    steep = define_activation("steep", lambda s: anp.exp(50.0 * s), lambda s: anp.exp(50.0 * s))
    fig = plot_activation(steep, check_range=(-20.0, 20.0))
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("not finite here" in t for t in texts)


# --------------------------------------------------------------------------
# A check fails only with a reason; a reference that cannot be trusted is named
# --------------------------------------------------------------------------

WIDE = '''
import autograd.numpy as anp
from refattn.core.activations import Activation

soft = {"g": anp.exp, "h": anp.exp, "regularity": "smooth"}
sig = {"g": lambda s: 1 / (1 + anp.exp(-s)), "h": lambda s: 1 / (1 + anp.exp(-s)), "regularity": "smooth"}
tanhish = {"g": anp.sinh, "h": anp.cosh, "regularity": "smooth"}
wrong_far = {"g": anp.exp, "h": anp.exp, "dh": lambda s: anp.where(s > 100.0, 0.5 * anp.exp(s), anp.exp(s))}

class Wide(Activation):
    name = "wide"
    def rho(self, s):
        return anp.tanh(s.astype("float64"))  # float64 whatever the scores
    def drho(self, s):
        return 1.0 - anp.tanh(s) ** 2
    def ell(self, s):
        return anp.logaddexp(s, -s)
    def dell(self, s):
        return anp.tanh(s)
'''


@pytest.fixture
def wide(tmp_path):
    p = tmp_path / "wide.py"
    p.write_text(WIDE)
    return p


@pytest.mark.parametrize("name", ["soft", "sig"])
def test_gradients_at_rounding_level_are_not_failures(name, wide, capsys):
    """Over [-400, 400] one score dominates each row and every gradient is rounding noise (1e-16 and less):
    a relative error there says nothing; the floor from the rounding bound passes a right VJP."""
    code, out, err = _check(capsys, "--json", "--activation", f"{wide}:{name}", "--range", "-400,400")
    r = json.loads(out)
    assert code == 0 and r["ok"], [(x["name"], x["status"], x.get("reason")) for x in r["rows"]]


def test_a_wrong_derivative_is_still_caught_over_a_wide_range(wide, capsys):
    code, out, _ = _check(capsys, "--json", "--activation", f"{wide}:wrong_far", "--range", "-400,400")
    r = json.loads(out)
    assert code == 1 and not r["ok"] and not r["derivatives"][1]["ok"]


@pytest.mark.parametrize("lo_hi", ["-400,400", "-700,700"])
def test_autograds_overflow_is_named_not_counted_against_the_vjp(lo_hi, wide, capsys):
    """autograd differentiates sinh/cosh through cosh^2, which overflows past |s| = 355: its reference is
    not to be trusted there. The row says so (which rows, why) and central differences judge them."""
    code, out, err = _check(capsys, "--activation", f"{wide}:tanhish", "--range", lo_hi)
    assert code == 0, out
    assert "autograd's reference overflows" in out and "central differences" in out
    assert "RuntimeWarning" not in err


def test_every_failure_says_why(wide, capsys):
    """A float32 row whose rho returns float64, and a VJP row that fails, each carry a reason line."""
    code, out, _ = _check(capsys, "--activation", f"{wide}:Wide", "--dtype", "float32")
    assert code == 1
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith("FAIL") or " FAIL:" in line or line.strip().startswith("FAIL"):
            assert "float64" in line or (i + 1 < len(lines) and lines[i + 1].startswith("    ")), (line, out)
    assert "come back float64 for float32 scores" in out


def test_points_where_autograds_derivative_overflows_are_named_not_skipped_in_silence(tmp_path, capsys):
    p = tmp_path / "big.py"
    p.write_text('import autograd.numpy as anp\nbig = {"g": anp.exp, "h": anp.exp, "dg": anp.exp, "dh": anp.exp}\n')
    code, out, _ = _check(capsys, "--activation", f"{p}:big", "--range", "-800,800")
    assert code == 0, out
    assert "not compared at" in out and "autograd's derivative of g" in out and "is not finite there" in out, out
    code, out, _ = _check(capsys, "--json", "--activation", f"{p}:big", "--range", "-800,800")
    skipped = json.loads(out)["derivatives"][0]["not_compared"]
    assert skipped and min(skipped) > 709  # e^s overflows past s = 709.78
