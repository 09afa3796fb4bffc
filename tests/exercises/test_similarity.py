"""Copies found by structure: rewritten copies of the model solutions, of the library and of a
classmate are found; correct answers written independently are not paired.

The answers are in ``tests/exercises/copies.py``: five independent correct answers to each of
exercises 01, 03 and 08, and a rewriter that renames, respells, swaps and reorders as a student
hiding a copy would.
"""

import inspect
import json
import textwrap
import zipfile

import pytest

from refattn.cli import main as cli_main
from refattn.exercises import EXERCISES, exercise, grade_many
from refattn.exercises import similarity
from refattn.exercises.export import solution_source, starter

from tests.exercises.copies import INDEPENDENT, rewrite


def _sources(ex):
    return solution_source(ex), starter(solution_source(ex))


@pytest.fixture(scope="module")
def references():
    return similarity.fingerprints(EXERCISES, _sources)


def _report(tmp_path, ex, text, references):
    path = tmp_path / f"{ex.stem}.py"
    path.write_text(text)
    return similarity.similarity_report([(ex, path)], references)[0]


def test_renaming_reformatting_reordering_and_respelling_leave_the_normalised_text_as_it_was():
    a = """
import numpy as np

def f(s, u):
    e = np.exp(s - np.max(s, axis=-1, keepdims=True))  # shift
    t = np.sum(u, axis=-1)
    phi = e / np.sum(e, axis=-1, keepdims=True)
    return phi * (u - np.sum(u * phi, axis=-1, keepdims=True)) + t
"""
    b = """
import numpy


def g(x, y):
    total = y.sum(-1)
    ex = numpy.exp(x - x.max(-1, keepdims=True))
    w = ex
    w = w / ex.sum(axis=-1, keepdims=True)
    return total + (y - (w * y).sum(axis=-1, keepdims=True)) * w
"""
    assert similarity.normalise(a)[0] != similarity.normalise(b)[0]  # b has one statement more (w = ex)
    b = b.replace("    w = ex\n    w = w / ex.sum", "    w = ex / ex.sum")
    assert similarity.normalise(a)[0] == similarity.normalise(b)[0]
    # a statement that reads what another writes keeps its place: the order is not simply sorted
    assert similarity.normalise("a = np.exp(x)\nb = np.log(a)\n")[0] != \
        similarity.normalise("b = np.log(a)\na = np.exp(x)\n")[0]
    assert similarity.normalise("a = np.exp(x)\nb = np.log(y)\n")[0] == \
        similarity.normalise("b = np.log(y)\na = np.exp(x)\n")[0]
    # one spelling per call: math, xp and numpy alike; augmented assignment as the assignment it is
    assert similarity.normalise("import math\ny = math.exp(x) - 1")[0] == \
        similarity.normalise("from numpy import exp\ny = -1 + exp(x)")[0]
    assert similarity.normalise("y = np.dot(a, b.T)")[0] == similarity.normalise("y = a @ np.transpose(b)")[0]
    assert similarity.normalise("y = x\ny += 2 * z")[0] == similarity.normalise("y = x\ny = y + z * 2.0")[0]
    with pytest.raises(ValueError, match="not Python"):
        similarity.normalise("def f(:\n")


def test_every_model_solution_lightly_rewritten_is_flagged(tmp_path, references):
    """All fourteen, each rewritten three ways: names changed, calls respelt, operands swapped,
    independent statements reordered, laid out anew."""
    for ex in EXERCISES:
        for seed in range(3):
            text = rewrite(solution_source(ex), keep=ex.functions, seed=seed)
            assert text != solution_source(ex)
            row = _report(tmp_path, ex, text, references)
            assert row["flagged"] and row["solution_score"] >= similarity.THRESHOLD, (ex.stem, seed, row)


def test_a_renamed_copy_of_the_library_is_flagged(tmp_path, references):
    from refattn.core.activations import Softmax

    copied = textwrap.dedent(inspect.getsource(Softmax.backward)).replace("grad_phi", "g").replace("cache", "c")
    text = ("import numpy as np\n\ndef array_module(*a):\n    return np\n\nclass checks:\n"
            "    activation_backward = staticmethod(lambda f: f)\n\n" + copied.replace("def backward(self", "def bw(me")
            + "\ndef softmax_vjp(s, u):\n    e = np.exp(s - s.max(-1, keepdims=True))\n"
            "    return bw(None, u, {'p': e / e.sum(-1, keepdims=True), 'axis': -1})\n")
    row = _report(tmp_path, exercise(1), text, references)
    assert row["flagged"] and row["library_score"] >= similarity.THRESHOLD, row


def test_independent_answers_are_neither_flagged_nor_paired(tmp_path, references):
    """Five correct answers to each exercise, written apart (and the model solution beside them): no
    pair among them, and none close to the library or the model solution."""
    for name, answers in INDEPENDENT.items():
        ex = exercise(name)
        scores = [_report(tmp_path, ex, text, references) for text in answers]
        assert not [r for r in scores if r["flagged"]], (name, scores)
        answers = {f"student {i}": text for i, text in enumerate(answers)} | {"model": solution_source(ex)}
        assert similarity.class_pairs(answers, starter(solution_source(ex))) == [], name


def _class(root):
    """Ten students: A to E answer 01, 03 and 08 independently; F copies A's 01, G and H copy C's 03 (H
    from G's copy), I copies E's 08, each rewritten; J hands in every model solution rewritten."""
    ex1, ex3, ex8 = exercise(1), exercise(3), exercise(8)
    files = {}
    for k, ex in enumerate((ex1, ex3, ex8)):
        for i, who in enumerate("ABCDE"):
            files[who, ex.stem] = INDEPENDENT[ex.name][(i + k) % 5]
    files["F", ex1.stem] = rewrite(files["A", ex1.stem], ex1.functions, 1)
    files["G", ex3.stem] = rewrite(files["C", ex3.stem], ex3.functions, 2)
    files["H", ex3.stem] = rewrite(files["G", ex3.stem], ex3.functions, 3)
    files["I", ex8.stem] = rewrite(files["E", ex8.stem], ex8.functions, 4)
    for ex in EXERCISES:
        files["J", ex.stem] = rewrite(solution_source(ex), ex.functions, 9)
    for (who, stem), text in files.items():
        (root / who).mkdir(parents=True, exist_ok=True)
        (root / who / f"{stem}.py").write_text(text)
    return files


EXPECTED = [("01-softmax-vjp", ["A", "F"]), ("03-reweighted-vjp", ["C", "G"]), ("03-reweighted-vjp", ["C", "H"]),
            ("03-reweighted-vjp", ["G", "H"]), ("08-prop1-new-activation", ["E", "I"])]


def test_the_copies_in_a_class_are_found_with_the_evidence_side_by_side(tmp_path, capsys):
    root = tmp_path / "class"
    files = _class(root)
    (root / "A" / "notes.py").write_text("not an answer\n")
    (root / "B" / "09-closure-gap.py").write_text("def gap(s, c:\n")  # not Python: listed, not compared
    assert cli_main(["exercises", "similarity", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(p["exercise"], p["students"]) for p in report["pairs"]] == EXPECTED
    for p in report["pairs"]:
        assert p["score"] >= similarity.THRESHOLD and p["shared"] >= similarity.MIN_SHINGLES
        a, b = (files[who, p["exercise"]].splitlines() for who in p["students"])
        assert len(p["evidence"]) >= 3
        for (la, ta), (lb, tb) in p["evidence"]:  # each statement as written, at its line
            assert " ".join(a[la - 1].split()) in ta and " ".join(b[lb - 1].split()) in tb
    assert {(c["student"], c["exercise"]) for c in report["close_to_a_reference"]} == \
        {("J", ex.stem) for ex in EXERCISES}
    assert [(n["student"], n["file"]) for n in report["not_compared"]] == [("B", "B/09-closure-gap.py")]
    assert report["students"] == 10 and report["answers"]["01-softmax-vjp"] == 7
    # the text: each pair with its statements side by side
    assert cli_main(["exercises", "similarity", str(root), "--exercises", "03"]) == 0
    text = capsys.readouterr().out
    assert "03-reweighted-vjp: C and G" in text and "C/03-reweighted-vjp.py" in text and " | " in text
    assert "3 pairs of near-copies" in text and "01-softmax-vjp" not in text


def test_gradescopes_export_zip_names_the_students(tmp_path, capsys):
    """The zip of Gradescope's "Export Submissions": a folder per submission, named in its metadata."""
    yaml = pytest.importorskip("yaml")
    files = _class(tmp_path / "class")
    ids = {who: f"submission_{1000 + i}" for i, who in enumerate("ABCDEFGHIJ")}
    meta = {ids[w]: {":submitters": [{":name": f"Student {w}", ":sid": str(i)}], ":score": 1.0}
            for i, w in enumerate(ids)}
    zpath = tmp_path / "export.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("assignment_42_export/submission_metadata.yml", yaml.safe_dump(meta))
        for (who, stem), text in files.items():
            z.writestr(f"assignment_42_export/{ids[who]}/{stem}.py", text)
    assert cli_main(["exercises", "similarity", str(zpath), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["named_by_metadata"] is True
    assert [(p["exercise"], p["students"]) for p in report["pairs"]] == \
        [(stem, [f"Student {w} ({ids[w]})" for w in pair]) for stem, pair in EXPECTED]


def test_the_similarity_command_refuses_bad_input_in_one_line(tmp_path, capsys):
    for args, option in (([str(tmp_path / "nowhere")], "CLASS"), ([str(tmp_path), "--exercises", "99"], "--exercises")):
        assert cli_main(["exercises", "similarity", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and option in err[0], err


@pytest.mark.slow
def test_the_answers_used_here_are_right():
    """The independent answers and the rewritten model solutions pass the public cases: they are
    correct answers, and the rewrites are copies, not other answers."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        todo = [(exercise(n), t) for n, ts in INDEPENDENT.items() for t in ts]
        todo += [(ex, rewrite(solution_source(ex), ex.functions, 0)) for ex in EXERCISES]
        items = []
        for i, (ex, text) in enumerate(todo):
            items.append((ex.name, str(Path(tmp) / f"{i}-{ex.stem}.py")))
            Path(items[-1][1]).write_text(text)
        for verdict in grade_many(items, timeout=60):
            assert verdict.ok, str(verdict)


def test_the_teaching_page_states_the_rules_and_the_measured_scores(tmp_path, references, monkeypatch):
    """docs/teach.md's numbers are the code's: the thresholds, and the highest scores of the independent
    answers against the model solutions and against one another, as measured here."""
    from pathlib import Path

    page = " ".join((Path(__file__).resolve().parents[2] / "docs" / "teach.md").read_text().split())
    worst_reference = max(_report(tmp_path, exercise(name), text, references)["solution_score"]
                          for name, answers in INDEPENDENT.items() for text in answers)
    monkeypatch.setattr(similarity, "THRESHOLD", 0.0)
    monkeypatch.setattr(similarity, "MIN_SHINGLES", 0)
    worst_pair = max(p["score"] for name, answers in INDEPENDENT.items() for p in similarity.class_pairs(
        {f"s{i}": t for i, t in enumerate(answers)} | {"model": solution_source(exercise(name))},
        starter(solution_source(exercise(name)))))
    monkeypatch.undo()
    for fact in (f"scoring {similarity.THRESHOLD} or more", f"on at least {similarity.MIN_SHINGLES} runs",
                 f"runs of {similarity.K} tokens", f"in more than {similarity.COMMON[0]} answers and more than a "
                 f"tenth of the class", f"over {similarity.MAX_BYTES // 1024} KiB or {similarity.MAX_NODES} syntax-tree nodes",
                 f"at most {worst_reference:.2g} against the model solutions and {worst_pair:.2g} against one another"):
        assert fact in page, fact
    assert similarity.COMMON[1] == 0.1


def test_an_answer_too_large_or_too_deep_to_compare_is_listed_not_compared(tmp_path):
    """Each answer is compared in bounded time: one over the size, the syntax-tree or the nesting
    limit is listed with its reason, and the others are still compared."""
    from refattn.exercises.classroom import read_class

    ex = exercise(1)
    many = "x = [" + ", ".join(["a"] * similarity.MAX_NODES) + "]\n"  # small on disk, many nodes
    texts = {"big": "# padding\n" * (similarity.MAX_BYTES // 10 + 1), "many": many,
             "deep": "x = " + "(" * 5000 + "1" + ")" * 5000 + "\n", "fine": solution_source(ex)}
    for who, text in texts.items():
        (tmp_path / who).mkdir()
        (tmp_path / who / f"{ex.stem}.py").write_text(text)
    assert len(many.encode()) <= similarity.MAX_BYTES
    answers, skipped, _ = read_class(tmp_path, [ex])
    assert list(answers[ex.stem]) == ["fine"]
    why = {who: reason for who, _, reason in skipped}
    assert set(why) == {"big", "many", "deep"}
    assert "KiB" in why["big"] and str(similarity.MAX_NODES) in why["many"] and why["deep"]
