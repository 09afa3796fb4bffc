"""The lecturer's kit around the graders: the problem set of a homework, the scoring the lecturer sets,
the answer key, the licences and the citation.

The PDFs are printed by headless Chromium with the ``docs`` extra; where either is missing the tests
that print skip with the reason (CI, with ``REFATTN_EXTRAS_REQUIRED=1``, has both and fails instead).
"""

import json
import os
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.support import required

from refattn.cli import main as cli_main
from refattn.exercises import EXERCISES, exercise, grade
from refattn.exercises import pdf as pdf_module
from refattn.exercises.credit import credit
from refattn.exercises.export import PROBLEM_SET, solution_path
from refattn.exercises.gradescope import group_score

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _tools_missing():
    try:
        pdf_module.check_tools("--course")
    except ValueError as exc:
        return str(exc)
    return None


def _need_pdf_tools():
    why = _tools_missing()
    if why is None:
        return
    if required():
        pytest.fail(f"the PDF tools are required here: {why}")
    pytest.skip(why)


def _pdf_text(path):
    pypdf = pytest.importorskip("pypdf")
    return "\n".join(page.extract_text() for page in pypdf.PdfReader(str(path)).pages)


def test_the_problem_set_holds_the_chosen_exercises_their_points_the_course_and_the_due_date(tmp_path, capsys):
    _need_pdf_tools()
    out = tmp_path / "homework"
    assert cli_main(["exercises", "export", "--student", str(out), "--exercises", "01,03", "--points",
                     "01=10,03=25", "--course", "Attention 101", "--due", "2026-12-15"]) == 0
    capsys.readouterr()
    text = " ".join(_pdf_text(out / PROBLEM_SET).split())
    for fact in ("Attention 101", "2026-12-15", "Total: 35 points", "(10 points)", "(25 points)",
                 exercise(1).title, exercise(3).title, "Your derivation", credit("text")):
        assert fact in text, fact
    # the statements' mathematics typeset as in the book: exercise 03's "$g = h = $ softplus" too
    assert "$" not in text and "\\(" not in text, text[text.find("$") - 200:text.find("$") + 50]
    # an answer box is never split across a page break
    assert re.search(r"\.written \{[^}]*break-inside: avoid", pdf_module._CSS)
    others = [ex.title for ex in EXERCISES if ex.number not in (1, 3)]
    assert not [t for t in others if t in text]


def test_without_the_pdf_tools_the_problem_set_is_one_line_and_nothing_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("REFATTN_CHROMIUM", str(tmp_path / "no-chromium"))
    out = tmp_path / "homework"
    assert cli_main(["exercises", "export", "--student", str(out), "--course", "X"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--course" in err[0] and "chromium" in err[0].lower(), err
    assert not out.exists()


@pytest.mark.parametrize("args, option", [
    (["--course", "X", "--due", "15/12/2026"], "--due"), (["--course", " "], "--course"),
    (["--due", "2026-12-15"], "--due"), (["--gradescope", "z.zip", "--hidden-weight", "1.5"], "--hidden-weight"),
    (["--gradescope", "z.zip", "--hidden-weight", "nan"], "--hidden-weight"), (["--points", "3"], "--points"),
    (["--answer-key", "key.txt"], "--answer-key")])
def test_the_kit_options_refuse_bad_input_in_one_line(args, option, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    student = ["--student", "h"] if option not in ("--hidden-weight", "--answer-key") else []
    assert cli_main(["exercises", "export", *student, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and option in err[0], err
    assert not list(tmp_path.iterdir())


def test_the_export_reports_points_weights_and_the_seed_as_json(tmp_path, capsys):
    zpath = tmp_path / "hw.zip"
    assert cli_main(["exercises", "export", "--gradescope", str(zpath), "--exercises", "01,03", "--points",
                     "01=10,03=25", "--hidden-weight", "0.7", "--all-or-nothing", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)["gradescope"]
    assert done["points_per_exercise"] == {"01-softmax-vjp": 10.0, "03-reweighted-vjp": 25.0}
    assert done["points"] == 35 and done["hidden_weight"] == 0.7 and done["all_or_nothing"] is True
    assert done["hidden_seed"] == "per submission" and done["required_cases"] == "zero"


def _grade_as_gradescope(tmp_path, text, *args):
    zpath = tmp_path / "hw.zip"
    assert cli_main(["exercises", "export", "--gradescope", str(zpath), "--exercises", "01", "--points", "01=10",
                     *args]) == 0
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "01-softmax-vjp.py").write_text(textwrap.dedent(text))
    import subprocess

    r = subprocess.run([sys.executable, "-m", "refattn", "exercises", "try-gradescope", str(zpath), "--submission",
                        str(sub), "--json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return {t["name"]: t for t in json.loads(r.stdout)["tests"]}


NO_SHIFT = """
    import numpy as np
    def softmax_vjp(s, u):
        e = np.exp(s)
        p = e / e.sum(-1, keepdims=True)
        return p * (u - np.sum(u * p, -1, keepdims=True))
    """


def test_the_hidden_weight_splits_the_points(tmp_path, capsys):
    tests = _grade_as_gradescope(tmp_path, solution_path(exercise(1)).read_text(), "--hidden-weight", "0.7")
    capsys.readouterr()
    assert tests["01 softmax-vjp: public cases"]["max_score"] == pytest.approx(3.0)
    assert tests["01 softmax-vjp: hidden cases"]["max_score"] == pytest.approx(7.0)
    assert tests["01 softmax-vjp: public cases"]["score"] == pytest.approx(3.0)


def test_a_failed_must_zeroes_its_group_unless_counted(tmp_path, capsys):
    """The statement says softmax's VJP must stay finite near 800: an answer without the max-shift
    passes the other public cases and scores 0 for the group, or by the share passed with
    ``--required-cases count``."""
    for sub in ("zero", "count"):
        (tmp_path / sub).mkdir()
    public = _grade_as_gradescope(tmp_path / "zero", NO_SHIFT)["01 softmax-vjp: public cases"]
    assert public["score"] == 0 and "required case" in public["output"]
    counted = _grade_as_gradescope(tmp_path / "count", NO_SHIFT, "--required-cases", "count")
    public = counted["01 softmax-vjp: public cases"]
    assert 0 < public["score"] < public["max_score"]
    capsys.readouterr()


def test_all_or_nothing(tmp_path):
    verdict = grade("softmax-vjp", str(solution_path(exercise(1))), hidden=True, isolation="python")
    assert group_score(verdict, False, 5.0, {"all_or_nothing": True}) == (5.0, "")
    flipped = tmp_path / "flipped.py"
    source = solution_path(exercise(1)).read_text()
    assert "    return phi * (u -" in source
    flipped.write_text(source.replace("    return phi * (u -", "    return -phi * (u -"))
    verdict = grade("softmax-vjp", str(flipped), hidden=True, isolation="python")
    assert not verdict.ok
    assert group_score(verdict, False, 5.0, {"all_or_nothing": True, "required_cases": "count"})[0] == 0.0
    partial = np.array([c["ok"] for c in verdict.cases if not c["hidden"]])
    if partial.any():  # by the share passed, a partly right answer would have scored
        assert group_score(verdict, False, 5.0, {"required_cases": "count"})[0] > 0


def test_the_licences_and_the_citation():
    licence = (ROOT / "LICENSE").read_text()
    assert "MIT License" in licence and "Creative Commons Attribution 4.0" in licence
    assert "Permission is hereby granted, free of charge" in licence
    yaml = pytest.importorskip("yaml")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert {"cff-version", "message", "title", "authors"} <= set(cff)
    assert cff["cff-version"] == "1.2.0" and all("name" in a or "family-names" in a for a in cff["authors"])
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert cff["version"] == version
    readme = (ROOT / "README.md").read_text()
    refs = {r["notes"]: r for r in cff["references"]}
    assert set(refs) == {"TanhMax", "Cog", "NeuralAttn", "Expressive"}
    for short, ref in refs.items():  # the one table of the papers, in the README, agrees
        row = next(line for line in readme.splitlines() if line.startswith(f"| {short} |"))
        assert ref["title"] in row and str(ref["year"]) in row, short
        ident = ref.get("doi") or ref["identifiers"][0]["value"]
        assert ident.replace("arXiv:", "") in row, short
    for page in ("README.md", "docs/teach.md"):
        text = (ROOT / page).read_text()
        assert "CC BY 4.0" in text and "MIT" in text and "CITATION.cff" in text, page


def test_the_handout_says_what_to_submit_and_where_the_hidden_cases_run(tmp_path, capsys):
    out = tmp_path / "h"
    assert cli_main(["exercises", "export", "--student", str(out), "--exercises", "01"]) == 0
    capsys.readouterr()
    readme = " ".join((out / "README.md").read_text().split())
    assert "What to submit:" in readme and "under their own names (`NN-name.py`)" in readme
    assert "hidden cases" in readme and "drawn anew for each submission" in readme
    assert re.search(r"\.venv/bin/python check\.py softmax-vjp 01-softmax-vjp\.py", readme)


def test_the_answer_key_holds_worked_solutions_and_none_of_its_lines_is_in_a_handout(tmp_path, capsys):
    _need_pdf_tools()
    key = tmp_path / "key.pdf"
    assert cli_main(["exercises", "export", "--answer-key", str(key), "--exercises", "01,03", "--course", "C"]) == 0
    capsys.readouterr()
    raw = _pdf_text(key)
    text = " ".join(raw.split())
    assert len(text) > 5000 and "The derivation" in text and "Common wrong answers" in text
    assert credit("text", "code") in text
    # code printed as code: no fence left, and a wrong answer's lines stay lines
    assert "```" not in raw and "python wrong" not in raw and "grader softmax-vjp" not in raw
    assert re.search(r"^\s*e = np\.exp\(s\)\s+# no shift\s*$", raw, re.M), raw[:3000]
    assert exercise(1).title in text and exercise(3).title in text and exercise(2).title not in text
    assert "The model solution" in text and "instructors" in text
    # refused over an existing file, unless --force
    assert cli_main(["exercises", "export", "--answer-key", str(key)]) == 2
    assert "--force" in capsys.readouterr().err


# ------------------------------------------------------------------------------
# Exports touch nothing the user did not name
# ------------------------------------------------------------------------------


@pytest.fixture
def clone(tmp_path, monkeypatch):
    """A copy of the repository's sources (statements, model solutions, derivations, package, README,
    LICENSE) that the export reads in place of this clone's, so that a refusal that failed would
    damage the copy only. Returns its root and a function giving a digest of every file in it."""
    import hashlib
    import shutil

    from refattn.exercises import export

    root = tmp_path / "clone"
    for name in ("exercises", "instructor", "derivations", "refattn"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("README.md", "LICENSE"):
        shutil.copy(ROOT / name, root / name)
    monkeypatch.setattr(export, "PACKAGE", root / "refattn")
    monkeypatch.setattr(export, "statements_dir", lambda: root / "exercises")
    monkeypatch.setattr(export, "solutions_dir", lambda: root / "instructor" / "solutions")
    monkeypatch.setattr(export, "derivations_dir", lambda: root / "derivations")

    def digest():
        return {p.relative_to(tmp_path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(tmp_path.rglob("*")) if p.is_file() and not p.is_symlink()}

    return root, digest


@pytest.mark.parametrize("target", [".", "instructor/solutions", "instructor", "exercises", "derivations",
                                    "refattn", "refattn/exercises", "exercises/new-folder", "docs/handout"])
def test_an_export_onto_the_repositorys_sources_is_refused_force_or_not(target, clone, capsys, monkeypatch):
    """The reproductions: --student onto the clone's root replaced README.md and five derivations;
    onto instructor/solutions it replaced the model solutions with blank starters; onto exercises it
    rewrote every statement. Each is now one line and exit 2, and not a byte of the clone changes."""
    root, digest = clone
    monkeypatch.chdir(root)
    before = digest()
    for force in ([], ["--force"]):
        assert cli_main(["exercises", "export", "--student", target, *force]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--student" in err[0] and "repository" in err[0], err
    for option, name in (("--gradescope", "autograder.zip"), ("--answer-key", "key.pdf")) * (target != "."):
        assert cli_main(["exercises", "export", option, f"{target}/{name}", "--force"]) == 2
        assert option in capsys.readouterr().err
    assert digest() == before


def test_nothing_inside_the_target_is_followed_through_a_link(clone, tmp_path, capsys):
    """A link inside the handout's folder (to a folder or a file outside it) is refused, --force or not,
    before anything is written; what the links point to is untouched."""
    root, digest = clone
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "README.md").write_text("mine\n")
    for link, to in (("derivations", outside), ("README.md", outside / "README.md"),
                     ("checker", outside), ("01-softmax-vjp.py", outside / "README.md")):
        handout = tmp_path / f"handout-{link}"
        handout.mkdir()
        (handout / link).symlink_to(to)
        before = digest()
        assert cli_main(["exercises", "export", "--student", str(handout), "--force"]) == 2
        err = capsys.readouterr().err
        assert "symbolic link" in err and link in err, err
        assert digest() == before and sorted(os.listdir(handout)) == [link]
    assert (outside / "README.md").read_text() == "mine\n" and sorted(os.listdir(outside)) == ["README.md"]


def test_every_check_runs_before_the_first_byte_and_no_part_file_is_left(clone, tmp_path, capsys, monkeypatch):
    """A folder named like the zip, a folder where the handout's README.md goes, a file where a folder
    goes: refused before anything is written (the zip before it is built), and no .part file anywhere;
    a write that fails half way leaves no .part file either."""
    from refattn.exercises import export

    root, digest = clone
    (tmp_path / "X.zip").mkdir()
    (tmp_path / "h1" / "README.md").mkdir(parents=True)
    (tmp_path / "h2").mkdir()
    (tmp_path / "h2" / "checker").write_text("a file where a folder goes\n")
    (tmp_path / "key.pdf").mkdir()
    before = digest()

    def built(*args, **kwargs):
        raise AssertionError("the zip was being built before its target was checked")

    monkeypatch.setattr("refattn.exercises.similarity.fingerprints", built)
    for args, option in ((["--gradescope", str(tmp_path / "X.zip"), "--force"], "--gradescope"),
                         (["--student", str(tmp_path / "h1"), "--force"], "--student"),
                         (["--student", str(tmp_path / "h2"), "--force"], "--student"),
                         (["--answer-key", str(tmp_path / "key.pdf"), "--force"], "--answer-key")):
        assert cli_main(["exercises", "export", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and option in err[0], err
        assert digest() == before
    assert not list(tmp_path.rglob("*.part")) and not list(tmp_path.rglob(".*.part"))

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.undo()
    monkeypatch.setattr(export.os, "replace", full_disk)
    with pytest.raises(OSError):
        export.export_gradescope(tmp_path / "a.zip", exercises=[exercise(1)])
    with pytest.raises(OSError):
        export.write_atomic(tmp_path / "b.txt", b"data")
    assert not (tmp_path / "a.zip").exists() and not (tmp_path / "b.txt").exists()
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".part")]


def test_totals_are_rounded_once_not_summed_from_rounded_scores(tmp_path, capsys):
    """Points that split into thirds: the total is the exact sum rounded, not the rounded tests summed
    (which gave 76.6666 for 76.6667)."""
    from refattn.exercises.gradescope import try_zip

    zpath = tmp_path / "thirds.zip"
    assert cli_main(["exercises", "export", "--gradescope", str(zpath), "--exercises", "01,02,03",
                     "--points", "3.33333", "--hidden-weight", "0.5"]) == 0
    capsys.readouterr()
    results, _, _ = try_zip(zpath)
    shown = [t["score"] for t in results["tests"] if t["max_score"]]
    assert shown == [round(3.33333 / 2, 4)] * 6  # each test's score rounded to 4 places: 1.6667
    assert results["score"] == round(3 * 3.33333, 4) == 10.0 != round(sum(shown), 4)  # not 10.0002


def test_the_licence_shipped_outside_a_clone_is_the_one_installed_with_the_package(tmp_path, monkeypatch):
    """An autograder exported from an installed refattn (no clone beside it) still ships LICENSE whole:
    the copy installed with the package, which is the repository's."""
    from refattn.exercises import export

    monkeypatch.setattr(export, "_clone_roots", set)
    monkeypatch.setattr(export, "PACKAGE", tmp_path / "refattn")
    assert export.licence_text() == (ROOT / "LICENSE").read_text(encoding="utf-8")
    monkeypatch.setattr(export.metadata, "distribution", lambda name: (_ for _ in ()).throw(
        export.metadata.PackageNotFoundError(name)))
    with pytest.raises(ValueError, match="LICENSE"):
        export.licence_text()
