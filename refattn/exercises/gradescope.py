"""The Gradescope autograder: grade a submission folder, write ``results.json``.

``run_autograder`` (from :func:`refattn.exercises.export.export_gradescope`)
runs ``python -m refattn.exercises.gradescope --root ROOT`` with Gradescope's
layout under ``ROOT`` (``/autograder`` there): ``source/`` (the unpacked zip,
with ``refattn_autograder.json``), ``submission/`` (the student's files) and
``results/``. Each exercise's answer is the submitted file ``NN-name.py``
(the starter's name; ``name.py`` is accepted too, in any subfolder); a
symbolic link is followed only where it stays inside the submission.

Gradescope runs the autograder as root, so the answers run as another user,
alone, under limits (:mod:`refattn.exercises.isolation`); before grading,
``source/``, ``submission/``, ``results/`` and the grader's environment are
made readable by root alone. The hidden cases' seed is drawn per submission:
a hash of the zip's secret and the submitted answers, so no two submissions
see the same hidden inputs and none can be learnt from another's feedback.

``results.json`` has one test per exercise and group: ``NN name: public
cases`` (``visible``) and ``NN name: hidden cases`` (the export's hidden
visibility), each worth half the exercise's points (all of them when it has
no hidden cases), scored by the fraction of cases passed; and one test for
the instructor only (``hidden``, 0 points): the isolation the run had and the
similarity report (:mod:`refattn.exercises.similarity`). A missing file
scores 0 with a line saying which name was looked for. The file is written
whatever happens, atomically, by the grader alone: an autograder failure (a
missing or broken settings file, a grader that crashes, an interruption, a
``results.json`` that existed before the grader started) is a result with a
score of 0 and its message, and ``run_autograder`` writes one itself when
Python or the dependencies are missing (a failed ``setup.sh``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

from .credit import credit

__all__ = ["answer_names", "results_for", "try_zip", "format_results", "main", "submission_seed"]

#: The test that only the instructor sees (Gradescope's ``hidden`` visibility, 0 points).
INSTRUCTOR_TEST = "instructor only: how the answers ran, and their similarity to the library and the model solutions"


def answer_names(ex) -> set:
    """The file names (lower case) an answer to ``ex`` may have: ``NN-name.py`` or ``name.py``, with
    ``-`` or ``_``."""
    return {f"{ex.stem}.py", f"{ex.name}.py", f"{ex.stem.replace('-', '_')}.py", f"{ex.name.replace('-', '_')}.py"}


def _find(submission: Path, ex):
    """The submitted answer to ``ex``: ``(path, None)``, ``(None, why)`` for a file that cannot be
    graded (a link that leaves the submission), or ``(None, None)`` when there is none.

    ``NN-name.py`` (or ``name.py``), anywhere below ``submission``; symbolic links to folders are
    not followed, a link to a file only where it stays inside the submission.
    """
    wanted = answer_names(ex)
    top = os.path.realpath(submission)
    found = []
    for base, dirs, files in os.walk(submission):
        dirs.sort()
        for name in sorted(files):
            if name.lower() in wanted:
                found.append(Path(base) / name)
    for path in found:
        real = os.path.realpath(path)
        if os.path.commonpath([top, real]) != top:
            return None, (f"{path.relative_to(submission)} is a link to a file outside your submission: "
                          f"submit the file itself")
        if os.path.isfile(real):
            return path, None
    return None, None


def submission_seed(secret, files) -> int:
    """The cases' seed of one submission: a hash of the zip's ``secret`` and the submitted answers
    (``files``: paths; of each its size and at most the first
    :data:`~refattn.exercises.runner.MAX_ANSWER_BYTES` + 1 bytes, so that a huge file is never read
    whole), so that another submission draws other inputs."""
    from .runner import MAX_ANSWER_BYTES  # noqa: PLC0415

    h = hashlib.sha256(str(secret).encode())
    for path in sorted(files, key=lambda p: os.path.basename(p)):
        h.update(b"\0" + os.path.basename(path).encode() + b"\0" + str(os.path.getsize(path)).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read(MAX_ANSWER_BYTES + 1))
    return int.from_bytes(h.digest()[:8], "big")


def _test(name, score, max_score, output, visibility) -> dict:
    return {"name": name, "score": float(score), "max_score": float(max_score), "output": output,
            "visibility": visibility}


def _output(verdict, hidden) -> str:
    """The feedback of one group: its checks (hidden ones by kind), hints and what was printed."""
    if not verdict.cases:  # the answer never ran: the one line saying why
        return "\n".join(c.message for c in verdict.checks)
    lines = verdict.lines(hidden)
    lines += [f"hint: {h}" for h in verdict.group_hints.get("hidden" if hidden else "public", [])]
    if not hidden:  # what the hidden run printed is never shown: it may hold the hidden inputs
        for group, text in verdict.printed_in(False).items():
            shown = text.rstrip("\n").splitlines()[:20]
            lines += [f"your answer printed ({group}; not graded):"] + [f"  | {ln[:200]}" for ln in shown]
    return "\n".join(lines)


def _instructor_test(items, verdicts, isolation, config) -> dict:
    """The hidden test only the instructor sees: the isolation, the seed, the similarity report, grader errors."""
    from .runner import MAX_ANSWER_BYTES  # noqa: PLC0415
    from .similarity import similarity_report  # noqa: PLC0415

    report = similarity_report([(ex, p) for ex, p in items if os.path.getsize(p) <= MAX_ANSWER_BYTES],
                               config.get("similarity", {}))  # a file refused by its size is never read
    errors = {v.exercise: v.group_errors for v in verdicts if v.group_errors}
    instructor = {"isolation": isolation, "hidden_seed": "per submission" if config.get("hidden_seed") is None
                  else "fixed by the export", "similarity": report, "grader_errors": errors}
    return _test(INSTRUCTOR_TEST, 0, 0, json.dumps(instructor, indent=1, allow_nan=False), "hidden")


def results_for(root, config) -> dict:
    """The results of grading ``root/submission`` with ``config`` (the zip's settings)."""
    from .grading import exercise, grade_many  # noqa: PLC0415

    root = Path(root)
    submission = root / "submission"
    exercises = [(exercise(e["stem"]), float(e["points"])) for e in config["exercises"]]
    found = {ex.stem: _find(submission, ex) for ex, _ in exercises}
    items = [(ex, os.fspath(found[ex.stem][0])) for ex, _ in exercises if found[ex.stem][0] is not None]
    # the visible cases are drawn for each submission, whatever the hidden ones: a fixed hidden seed (the
    # export's --hidden-seed) gives every submission the same hidden inputs, never the same visible ones
    fresh = submission_seed(config["secret"], [path for _, path in items])
    seed = fresh if config.get("hidden_seed") is None else config["hidden_seed"]
    isolation = {}
    verdicts = grade_many(items, hidden=True, hidden_seed=seed, timeout=config["timeout_s"],
                          forbidden_dirs=[os.fspath(root / "source")], describe=isolation.update, unreadable="wrong",
                          public_seed=fresh if config.get("fresh_public", True) else None)
    by_stem = {v.exercise: v for v in verdicts}
    tests = []
    for ex, points in exercises:
        title = f"{ex.number:02d} {ex.name}"
        verdict = by_stem.get(ex.stem)
        n_hidden = verdict.group(True)[1] if verdict is not None and verdict.cases else \
            sum(1 for c in ex.cases(seed, seed) if c.hidden)
        public_points = points * (1.0 - config.get("hidden_weight", 0.5)) if n_hidden else points
        if verdict is None:
            missing = found[ex.stem][1] or f"no file {ex.stem}.py in your submission: nothing to grade"
            tests.append(_test(f"{title}: public cases", 0, public_points, missing, "visible"))
            if n_hidden:
                tests.append(_test(f"{title}: hidden cases", 0, points - public_points, missing,
                                   config["hidden_visibility"]))
            continue
        for hidden, max_score, visibility in ((False, public_points, "visible"),
                                              (True, points - public_points, config["hidden_visibility"])):
            if hidden and not n_hidden:
                continue
            score, why = group_score(verdict, hidden, max_score, config)
            out = (why + "\n" if why else "") + _output(verdict, hidden)
            error = verdict.group_errors.get("hidden" if hidden else "public")
            if error:
                out = f"grader error (not your answer's fault; your instructor can see it): {error}\n" + out
            name = f"{title}: {'hidden' if hidden else 'public'} cases"
            tests.append(_test(name, score, max_score, out, visibility))
    total = sum(t["score"] for t in tests)  # of the exact scores: rounded once, never the rounded ones summed
    for t in tests:
        t["score"] = round(t["score"], 4)
    missing = "" if submission.is_dir() and any(p for p, _ in found.values()) else \
        "No answer file was found in your submission (each is named like its starter, NN-name.py). "
    tests.append(_instructor_test(items, verdicts, isolation, config))
    return {"score": round(total, 4), "tests": tests, "visibility": "visible", "stdout_visibility": "hidden",
            "extra_data": {"isolation": isolation.get("level")},
            "output": missing + f"refattn exercises: {total:g} of {sum(t['max_score'] for t in tests):g} points. "
                      "Each exercise has public cases (the ones the handout's checker runs) and hidden ones."}


#: How a group of cases is scored (``export --gradescope``'s options, stored in the zip's settings):
#: ``hidden_weight``, the share of an exercise's points on its hidden cases; ``all_or_nothing``, a group
#: scores only when every case passes; ``required_cases``: ``"zero"``, a case the statement says the
#: answer *must* pass (:attr:`~refattn.exercises.judge.Case.required`: one property, such as finite where an
#: exponential overflows) zeroes its group when it fails and earns nothing when it passes (the other cases
#: score the answer's values), or ``"count"``, it counts as any other case.
SCORING_DEFAULTS = {"hidden_weight": 0.5, "all_or_nothing": False, "required_cases": "zero"}


def group_score(verdict, hidden, max_score, config) -> tuple:
    """``(score, why or "")`` of one group of cases of ``verdict`` under the scoring of ``config``."""
    cases = [c for c in verdict.cases if c["hidden"] == hidden]
    if not cases:
        return 0.0, ""
    scoring = {**SCORING_DEFAULTS, **{k: config[k] for k in SCORING_DEFAULTS if k in config}}
    failed_required = [c["kind"] for c in cases if c.get("required") and not c["ok"]]
    if scoring["required_cases"] == "zero":
        if failed_required:
            named = "a required case" if hidden else f"the required case {failed_required[0]!r}"
            return 0.0, (f"{named} failed (a property the statement says your answer must have): this group "
                         f"scores 0")
        cases = [c for c in cases if not c.get("required")] or cases  # a property gates; the values score
    passed = sum(c["ok"] for c in cases)
    if scoring["all_or_nothing"]:
        return (max_score, "") if passed == len(cases) else \
            (0.0, f"{passed} of {len(cases)} cases passed; this course scores a group only when all pass")
    return max_score * passed / len(cases), ""


def _failed(why) -> dict:
    """The results of a run that could not grade: a score of 0 and the one line saying why."""
    return {"score": 0.0, "tests": [], "visibility": "visible", "stdout_visibility": "hidden",
            "output": f"the autograder failed: {why}; this is not your submission's fault: tell your instructor"}


def _write(results_dir: Path, results: dict):
    """``results_dir/results.json``, whole or not at all: a fresh temporary file beside it (never a
    name anyone else chose), flushed, then moved over it."""
    results_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".results-", suffix=".json", dir=results_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2, allow_nan=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, results_dir / "results.json")
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _lock_down(root: Path):
    """As root: the autograder's folders and environment readable and writable by root alone, so that
    an answer's user (:mod:`refattn.exercises.isolation`) reaches none of them, even outside a jail."""
    if os.geteuid() != 0:
        return
    venv = os.environ.get("REFATTN_AUTOGRADER_VENV", str(root / "venv"))
    for folder in (root / "source", root / "submission", root / "results", Path(venv)):
        try:
            if folder.is_dir() and not folder.is_symlink():
                os.chmod(folder, 0o700)
        except OSError:
            pass


def try_zip(zip_path, submission=None, keep=None) -> tuple:
    """Run an exported autograder zip as Gradescope would, here: unpack it into ``ROOT/source``,
    copy the answer files of ``submission`` (a folder; the model solutions of this clone by
    default) into ``ROOT/submission``, run ``ROOT/source/run_autograder`` with this Python (in
    place of ``setup.sh``'s environment) and read ``ROOT/results/results.json``.

    ``ROOT`` is ``keep`` (a new folder, kept) or a temporary folder (removed). Returns
    ``(results, ROOT or None, what run_autograder printed)``. Raises ``ValueError`` (one line
    naming the argument) for a missing or foreign zip or submission folder.
    """
    import shutil  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import tempfile  # noqa: PLC0415
    import zipfile  # noqa: PLC0415

    from .export import solutions_dir  # noqa: PLC0415

    zip_path = Path(zip_path)
    if not zip_path.is_file() or not zipfile.is_zipfile(zip_path):
        raise ValueError(f"FILE.zip: no zip file {os.fspath(zip_path)!r}")
    with zipfile.ZipFile(zip_path) as z:
        infos = z.infolist()
        if "run_autograder" not in z.namelist():
            raise ValueError(f"FILE.zip: {os.fspath(zip_path)!r} holds no run_autograder: not an autograder zip")
        if submission is None:
            submission = solutions_dir()
            if submission is None:
                raise ValueError("--submission: expected a folder of answer files (no model solutions here: "
                                 "they are in a clone of the repository)")
        submission = Path(submission)
        if not submission.is_dir():
            raise ValueError(f"--submission: no folder {os.fspath(submission)!r}")
        if keep is not None and Path(keep).exists():
            raise ValueError(f"--keep: {os.fspath(keep)!r} exists; expected a new folder")
        root = Path(keep) if keep is not None else Path(tempfile.mkdtemp(prefix="refattn-gradescope-"))
        try:
            z.extractall(root / "source")
            for info in infos:  # zipfile drops the modes: setup.sh and run_autograder are executables
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(root / "source" / info.filename, mode)
            # as Gradescope receives it: every file, symbolic links kept as links
            shutil.copytree(submission, root / "submission", symlinks=True)
            (root / "results").mkdir()
            env = {**os.environ, "REFATTN_AUTOGRADER_ROOT": str(root), "REFATTN_AUTOGRADER_PYTHON": sys.executable}
            proc = subprocess.run([str(root / "source" / "run_autograder")], env=env, capture_output=True,
                                  text=True, check=False)
            results = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
        finally:
            if keep is None:
                shutil.rmtree(root, ignore_errors=True)
    return results, (root if keep is not None else None), proc.stdout + proc.stderr


def format_results(results) -> str:
    """``results.json`` as a short table: score, maximum and name of each test, then the total."""
    lines = [f"  {t['score']:>6g} / {t['max_score']:<4g} {t['name']}  [{t['visibility']}]" for t in results["tests"]]
    total = sum(t["max_score"] for t in results["tests"])
    lines.append(f"total: {results['score']:g} of {total:g} points")
    if not results["tests"] or results["score"] < total:
        lines.append(f"message: {results.get('output', '')}")
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m refattn.exercises.gradescope --root ROOT``: grade and write ``ROOT/results/results.json``."""
    parser = argparse.ArgumentParser(prog="python -m refattn.exercises.gradescope",
                                     description="grade a Gradescope submission folder")
    parser.add_argument("--root", default=os.environ.get("REFATTN_AUTOGRADER_ROOT", "/autograder"),
                        help="the autograder's root: source/, submission/, results/ (default /autograder)")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if (root / "results" / "results.json").exists() or (root / "results" / "results.json").is_symlink():
        why = "a results.json existed in the results folder before the grader started; nothing was graded"
        _write(root / "results", _failed(why))  # replaced, never trusted
        print(f"refattn autograder: {why}", file=sys.stderr)
        return 1
    _lock_down(root)
    from .runner import signals_as_interrupt  # noqa: PLC0415

    try:
        from .export import CONFIG_NAME  # noqa: PLC0415

        with signals_as_interrupt():  # SIGTERM (a platform's time limit) as Ctrl-C: results written
            config = json.loads((root / "source" / CONFIG_NAME).read_text(encoding="utf-8"))
            results = results_for(root, config)
    except KeyboardInterrupt:
        _write(root / "results", _failed("it was interrupted"))
        print("refattn autograder: interrupted", file=sys.stderr)
        return 130
    except BaseException as exc:  # noqa: BLE001 - whatever happens (SystemExit too), Gradescope gets a results file
        first = str(exc).splitlines()[0] if str(exc) else ""
        results = _failed(f"{type(exc).__name__}: {first}"[:300])
        _write(root / "results", results)
        print(results["output"], file=sys.stderr)
        return 1
    import refattn  # noqa: PLC0415

    print(f"refattn {refattn.__version__} from {os.path.dirname(refattn.__file__)}: "
          f"{results['score']:g} points written to {root / 'results' / 'results.json'}")
    results["output"] += "\n" + credit("code")  # the grader's code and its results: the project's
    _write(root / "results", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
