"""A class's answers compared (``refattn exercises similarity CLASS``): near-copies between students,
and answers close to the library or the model solutions (:mod:`refattn.exercises.similarity`).

``CLASS`` is a folder holding one folder per student, or the zip of
Gradescope's "Export Submissions" (or that zip unpacked): a folder
``submission_NNN`` per submission beside ``submission_metadata.yml``, which
names its students (read with PyYAML, of the ``docs`` extra; without it a
submission is named by its folder). A student's answer to an exercise is
their file named as the grader looks for it; symbolic links are not
followed, and a file over :data:`~refattn.exercises.similarity.MAX_BYTES`
or :data:`~refattn.exercises.similarity.MAX_NODES`, or not readable as Python,
is listed as not compared.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

from . import similarity
from .gradescope import answer_names

__all__ = ["read_class", "class_report", "format_class_report"]

METADATA = "submission_metadata.yml"


def _files(path):
    """``(relative path, read)`` of each plain file in the folder or zip ``path`` (links left out)."""
    if path.is_dir():
        for base, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                full = Path(base) / name
                if not full.is_symlink():
                    yield full.relative_to(path).as_posix(), lambda full=full: similarity.read_answer(full)
        return
    z = zipfile.ZipFile(path)
    for info in z.infolist():
        if not info.is_dir() and not stat.S_ISLNK(info.external_attr >> 16):
            yield info.filename, lambda info=info: _read_member(z, info)


def _read_member(z, info):
    with z.open(info) as f:
        data = f.read(similarity.MAX_BYTES + 1)
    if len(data) > similarity.MAX_BYTES:
        raise ValueError(f"larger than {similarity.MAX_BYTES // 1024} KiB")
    return data.decode("utf-8", errors="replace")


def _names(read):
    """``{submission folder: its students' names}`` from Gradescope's metadata (``{}`` without PyYAML)."""
    try:
        import yaml  # noqa: PLC0415  (PyYAML, of the docs extra)
    except ImportError:
        return {}
    try:
        meta = yaml.safe_load(read())
        return {key: ", ".join(s[":name"] for s in value[":submitters"]) for key, value in meta.items()}
    except (yaml.YAMLError, ValueError, AttributeError, KeyError, TypeError):
        return {}


def read_class(path, exercises) -> tuple:
    """``(answers, skipped, named)``: ``answers[stem][student] = (file, text)``, ``skipped`` the files
    not read ``(student, file, why)``, ``named`` whether Gradescope's metadata named the students
    (``None``: there is none).
    Raises ``ValueError`` (one line naming ``CLASS``) for a path that is neither a folder nor a zip."""
    path = Path(path)
    if not (path.is_dir() or (path.is_file() and zipfile.is_zipfile(path))):
        raise ValueError(f"CLASS: expected a folder of submissions or Gradescope's export zip, got {os.fspath(path)!r}")
    files = list(_files(path))
    meta = min((f for f in files if f[0].rsplit("/", 1)[-1] == METADATA), default=None, key=lambda f: len(f[0]))
    root = meta[0][:-len(METADATA)] if meta else ""
    names = _names(meta[1]) if meta else {}
    wanted = {name: ex.stem for ex in exercises for name in answer_names(ex)}
    answers, skipped = {ex.stem: {} for ex in exercises}, []
    for rel, read in files:
        parts = rel[len(root):].split("/") if rel.startswith(root) else []
        stem = wanted.get(parts[-1].lower()) if len(parts) >= 2 else None
        who = f"{names[parts[0]]} ({parts[0]})" if parts and parts[0] in names else parts[0] if parts else ""
        if stem is None or who in answers[stem]:
            continue
        try:
            answers[stem][who] = (rel, read())
            similarity.normalise(answers[stem][who][1])
        except (OSError, ValueError) as exc:
            answers[stem].pop(who, None)
            skipped.append((who, rel, str(exc)))
    return answers, skipped, bool(names) if meta else None


def class_report(path, exercises, sources) -> dict:
    """The near-copies of the class at ``path`` (:func:`similarity.class_pairs`, per exercise) and its
    answers close to a reference (:func:`similarity.fingerprints`; ``sources(ex)``: the model solution
    and its starter)."""
    answers, skipped, named = read_class(path, exercises)
    references = similarity.fingerprints(exercises, sources)
    pairs, close = [], []
    for ex in exercises:
        mine = answers[ex.stem]
        for pair in similarity.class_pairs({who: text for who, (_, text) in mine.items()}, sources(ex)[1]):
            pairs.append({"exercise": ex.stem, **pair, "files": [mine[who][0] for who in pair["students"]]})
        for who, (rel, text) in sorted(mine.items()):
            answer = similarity.shingles(text)
            scores = {kind: similarity.containment(answer, set(references[ex.stem][kind]))
                      for kind in ("library", "solution")}
            if any(v is not None and v >= similarity.THRESHOLD for v in scores.values()):
                close.append({"exercise": ex.stem, "student": who, "file": rel,
                              **{f"{k}_score": None if v is None else round(v, 3) for k, v in scores.items()}})
    students = {who for mine in answers.values() for who in mine}
    return {"class": os.fspath(path), "students": len(students), "named_by_metadata": named,
            "answers": {stem: len(mine) for stem, mine in answers.items()}, "threshold": similarity.THRESHOLD,
            "min_shingles": similarity.MIN_SHINGLES, "pairs": pairs, "close_to_a_reference": close,
            "not_compared": [{"student": w, "file": f, "why": y} for w, f, y in skipped]}


def format_class_report(report, width=58) -> str:
    """:func:`class_report` as text: each pair with its evidence side by side, then the answers close
    to the library or a model solution, then what was not compared."""
    lines = [f"{report['class']}: {report['students']} students, {sum(report['answers'].values())} answers; "
             f"pairs and answers scoring {report['threshold']:g} or more on {report['min_shingles']} or more runs "
             f"of {similarity.K} tokens (a reason to read them, not a verdict)"]
    for p in report["pairs"]:
        lines += ["", f"{p['exercise']}: {p['students'][0]} and {p['students'][1]}: {p['score']:g} "
                      f"({p['shared']} runs in common)", f"  {p['files'][0][:width]:{width}s} | {p['files'][1]}"]
        lines += [f"  {a[0]:4d}  {a[1][:width - 6]:{width - 6}s} | {b[0]:4d}  {b[1][:width - 6]}"
                  for a, b in p["evidence"]]
    lines += ["", f"{len(report['pairs'])} pair{'s' * (len(report['pairs']) != 1)} of near-copies."]
    for c in report["close_to_a_reference"]:
        lines.append(f"close to a reference: {c['student']}, {c['exercise']}: library {c['library_score']}, "
                     f"model solution {c['solution_score']}")
    lines += [f"not compared: {s['file']}: {s['why']}" for s in report["not_compared"]]
    if report["named_by_metadata"] is False:
        lines.append(f"students are named by their folders (Gradescope's {METADATA} is read with PyYAML, "
                     f"of the docs extra)")
    return "\n".join(lines)
