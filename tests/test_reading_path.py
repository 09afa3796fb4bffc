"""The README's reading path: the functions and tests a student reads, in order.

The table in README.md ("A reading path") lists each piece with its line
count. This test recomputes every count from the source, fails if the
README's table disagrees (so the counts stay true when the code changes), and
holds the two targets of issue 14: under 500 lines in all, and
``refattn/core/attention.py`` under 200 lines.
"""

import importlib
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (label in README, dotted object or file path) in reading order
READING_PATH = [
    ("refattn.core.backend.array_module", "refattn.core.backend.array_module"),
    ("refattn.core.activations.Activation.p", "refattn.core.activations.Activation.p"),
    ("refattn.core.activations.Activation.forward", "refattn.core.activations.Activation.forward"),
    ("refattn.core.activations.Activation.vjp", "refattn.core.activations.Activation.vjp"),
    ("refattn.core.activations.Softmax", "refattn.core.activations.Softmax"),
    ("refattn.core.activations.TanhMax", "refattn.core.activations.TanhMax"),
    ("refattn.core.scores.Dot", "refattn.core.scores.Dot"),
    ("refattn.core.scores.Neural.forward", "refattn.core.scores.Neural.forward"),
    ("refattn.core.scores.Neural.vjp", "refattn.core.scores.Neural.vjp"),
    ("refattn.core.attention.attention", "refattn.core.attention.attention"),
    ("refattn.core.attention.attention_backward", "refattn.core.attention.attention_backward"),
    ("refattn.core.gradcheck.gradcheck", "refattn.core.gradcheck.gradcheck"),
    ("refattn.core.gradcheck._central_differences", "refattn.core.gradcheck._central_differences"),
    ("tests/test_activations.py::test_vjp_three_ways", "tests/test_activations.py::test_vjp_three_ways"),
    ("tests/test_activations.py::test_perturbed_vjp_is_caught",
     "tests/test_activations.py::test_perturbed_vjp_is_caught"),
]


def _resolve(dotted):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def _lines_of_test(spec):
    """Lines of a test function and its decorators, read from the file (not imported)."""
    path, name = spec.split("::")
    lines = (ROOT / path).read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"def {name}("))
    end = start + 1
    while end < len(lines) and (not lines[end] or lines[end][0] in " \t)"):
        end += 1
    while not lines[end - 1].strip():
        end -= 1
    while start > 0 and lines[start - 1].startswith("@"):
        start -= 1
    return end - start


def line_count(spec):
    if "::" in spec:
        return _lines_of_test(spec)
    return len(inspect.getsourcelines(_resolve(spec))[0])


def readme_table():
    """``{label: count}`` from the README's reading-path table."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## A reading path", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| *\d+ *\| *`([^`]+)` *\| *(\d+) *\|", section, flags=re.M)
    return {label: int(n) for label, n in rows}


def test_every_piece_of_the_reading_path_exists_and_the_readme_counts_are_true():
    counts = {label: line_count(spec) for label, spec in READING_PATH}
    table = readme_table()
    expected = "\n".join(f"| {i} | `{label}` | {n} |" for i, (label, n) in enumerate(counts.items(), 1))
    assert list(table) == list(counts), f"README reading path should list, in order:\n{expected}"
    assert table == counts, f"README line counts are stale; they should read:\n{expected}"


def test_reading_path_targets():
    total = sum(line_count(spec) for _, spec in READING_PATH)
    assert total < 500, f"the reading path is {total} lines; the target is under 500"
    attention_lines = len((ROOT / "refattn" / "core" / "attention.py").read_text().splitlines())
    assert attention_lines < 200, f"refattn/core/attention.py has {attention_lines} lines; the target is under 200"
    text = (ROOT / "README.md").read_text().split("## A reading path", 1)[1].split("\n## ", 1)[0]
    assert f"{total} lines in all" in text, f"README should state the total, {total} lines in all"
