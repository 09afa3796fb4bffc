"""The textbook: ``refattn/core/``, read whole, in the README's order.

The README's reading path lists the files of ``refattn/core/`` in the order a
student reads them, the mathematics first (activations, scores, attention,
gradcheck) and the plumbing last (backend, checks), with the number of lines
in all. These tests recompute that number from the files (so it stays true
when the code changes), hold the three formula files to their size
(activations, scores and attention at most 1,100 lines together: about 1,000
for the four papers' activations and their baselines, and about 25 for each
row of ``derivations/25-normalisers.md``; the plumbing has no cap, so nothing
is packed to fit), and check that the textbook stands
alone: importing it loads no refattn module outside ``refattn/core`` (nor the
fast path).
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "refattn" / "core"

#: The reading order: the mathematics, then the checker, then the plumbing (the array module, the checks).
ORDER = ["activations.py", "scores.py", "attention.py", "gradcheck.py", "backend.py", "checks.py"]


def _lines(name):
    return len((CORE / name).read_text().splitlines())


def test_core_holds_exactly_the_reading_path():
    assert sorted(p.name for p in CORE.glob("*.py")) == sorted(ORDER + ["__init__.py"])
    text = (CORE / "__init__.py").read_text()  # the package docstring names every file, in reading order
    assert all(n in text for n in ORDER)
    assert [text.index(n) for n in ORDER] == sorted(text.index(n) for n in ORDER)


def test_readme_lists_the_core_files_in_order_with_their_true_total():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("refattn/core/", 1)[1]
    found = [m for m in re.findall(r"`(?:refattn/core/)?(\w+\.py)`", readme) if m in ORDER]
    order = list(dict.fromkeys(found))
    assert order == ORDER, f"README lists {order}, expected {ORDER}"
    total = sum(_lines(n) for n in ORDER + ["__init__.py"])
    stated = re.search(r"([\d,]+) lines", section)
    assert stated, "README: no line count for the reading path"
    assert int(stated.group(1).replace(",", "")) == total, (stated.group(0), total)


def test_the_formulas_fit_their_size():
    maths = sum(_lines(n) for n in ("activations.py", "scores.py", "attention.py"))
    assert maths <= 1100, maths


def test_the_textbook_imports_nothing_outside_itself():
    code = ("import sys, refattn.core.attention, refattn.core.gradcheck; "
            "print(sorted(m for m in sys.modules if m.startswith('refattn.') and not m.startswith('refattn.core')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout


# --------------------------------------------------------------------------
# Derivation 01 names what exists
# --------------------------------------------------------------------------

DERIVATION_01 = ROOT / "derivations" / "01-reweighted-softmax.md"


def _core_classes():
    """``{name: class}`` of every class defined in ``refattn/core``."""
    import importlib  # noqa: PLC0415
    import inspect  # noqa: PLC0415

    out = {}
    for name in ORDER:
        module = importlib.import_module(f"refattn.core.{name[:-3]}")
        out.update({n: c for n, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__})
    return out


def _named(text):
    """Every ``Class.attribute`` in a code span of ``text`` whose class name starts with a capital."""
    return sorted(set(re.findall(r"`([A-Z]\w*)\.(\w+)`", text)))


def test_every_class_attribute_derivation_01_names_exists():
    classes = _core_classes()
    named = _named(DERIVATION_01.read_text(encoding="utf-8"))
    assert len(named) >= 20, named  # the derivation walks the code: the test reads what it names
    missing = [f"{c}.{a}" for c, a in named if c not in classes or not hasattr(classes[c], a)]
    assert not missing, f"derivation 01 names what refattn/core does not have: {missing}"


def test_the_facts_derivation_01_names_live_on_the_classes():
    """Section 3.1 and 4 name ``shift_invariant``, ``singular`` and ``singular_scores`` as attributes of
    each class (``SignExp.singular_scores``); softmax alone is shift invariant."""
    from refattn import ACTIVATIONS, activation  # noqa: PLC0415

    classes = _core_classes()
    for attr in ("shift_invariant", "singular", "singular_scores", "regularity", "formula", "source"):
        assert hasattr(classes["Activation"], attr), attr
    assert [n for n in ACTIVATIONS if activation(n).shift_invariant] == ["softmax"]
    assert classes["SignExp"].singular_scores == (0.0,)


def test_the_check_of_names_can_fail():
    assert _named("`Activation.backward` and `Softmax.nonesuch`, not `refattn.fast`") == [
        ("Activation", "backward"), ("Softmax", "nonesuch")]
    assert not hasattr(_core_classes()["Softmax"], "nonesuch")
