"""The learning path's times come from one table, and a self-learner finds the starters.

``docs/learning_path.py`` holds the path: each part's steps with their
minutes (an exercise step's are its exercises' labels, from
``refattn.exercises``) and the measured set-up time. The README, the book's
landing page and the exercises' index show the path in blocks it writes.
These tests check

* that every such block is what the table gives now (edit the table, then
  run ``.venv/bin/python docs/learning_path.py``), and that a block edited
  by hand is caught;
* the arithmetic as the pages print it, read back from the landing page:
  each part's minutes are the sum of its steps', each exercise step's the sum
  of its exercises' labels, every exercise on the path belongs to its part,
  and the README and the exercises' index give the same parts, titles and
  minutes;
* that outside those blocks the README and the landing page state no time;
* that the set-up time was measured;
* that the learning path's first page, the overview, tells a self-learner
  how to get the starters, with a command that runs as written and a check
  command that grades the unfilled starter (wrong, exit 1);
* that every number part 3's pages on speed (derivations 20 and 23) quote
  from a benchmark is that of the committed measurement it names
  (``benchmarks/results/*.json``), rounded to the digits the page shows.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from refattn.exercises import EXERCISES, PARTS
from refattn.exercises import format_list, list_exercises

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
LABELS = {ex.number: ex for ex in EXERCISES}


def _load_path():
    spec = importlib.util.spec_from_file_location("refattn_learning_path", ROOT / "docs" / "learning_path.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


path = _load_path()


def _text(page: str) -> str:
    return (ROOT / page).read_text(encoding="utf-8")


@pytest.mark.parametrize("page", sorted(path.BLOCKS))
def test_every_block_is_what_the_table_gives(page):
    text = _text(page)
    assert path.synced(page, text) == text, (
        f"{page} differs from docs/learning_path.py's table: run .venv/bin/python docs/learning_path.py")


def test_a_block_edited_by_hand_is_caught():
    text = _text("docs/index.md")
    edited = text.replace(f"({path.part_minutes(1)} minutes)", "(about 3 hours)", 1)
    assert edited != text and path.synced("docs/index.md", edited) == text
    with pytest.raises(ValueError, match="expected the blocks"):
        path.synced("docs/index.md", text.replace("<!-- learning path: start -->", ""))


def _landing_parts() -> dict[int, tuple[str, int, list[str]]]:
    """Part -> (title, its minutes, its steps as printed), read from the landing page."""
    text = _text("docs/index.md")
    heads = list(re.finditer(r"^### Part (\d): (.*) \((\d+) minutes\)$", text, re.M))
    out = {}
    for i, m in enumerate(heads):
        body = text[m.end():heads[i + 1].start() if i + 1 < len(heads) else text.index("end of learning path: path")]
        steps = [" ".join(s.split()) for s in re.split(r"^\d+\. ", body.split("\n\nAlso,")[0]
                                                       .split("\n\nFor a class")[0], flags=re.M)[1:]]
        out[int(m.group(1))] = (m.group(2), int(m.group(3)), steps)
    return out


def test_the_landing_pages_times_add_up():
    parts = _landing_parts()
    assert sorted(parts) == sorted(PARTS)
    for part, (title, total, steps) in parts.items():
        assert title == PARTS[part], f"part {part} is titled {title!r}; the exercises' statements say {PARTS[part]!r}"
        times = [int(re.search(r"\((\d+) minutes", s).group(1)) for s in steps]
        assert total == sum(times), f"part {part}: its steps take {' + '.join(map(str, times))} minutes, not {total}"
        exercise_steps = [s for s in steps if s.startswith("Exercises")]
        assert len(exercise_steps) == 1, f"part {part}: one step lists the exercises"
        numbers = [int(n) for n in re.findall(r"\]\(\.\./exercises/(\d\d)-[\w-]+\.md\)", exercise_steps[0])]
        stated = int(re.search(r"\((\d+) minutes", exercise_steps[0]).group(1))
        assert numbers and stated == sum(LABELS[n].minutes for n in numbers), (part, numbers, stated)
        assert all(LABELS[n].part == part for n in numbers), f"part {part} asks exercises of another part: {numbers}"
        assert total >= 150, f"part {part}: {total} minutes is not a lecture's worth"


def test_the_readme_and_the_exercises_index_agree_with_the_landing_page():
    parts = _landing_parts()
    readme = _text("README.md")
    for part, (title, total, steps) in parts.items():
        m = re.search(rf"^{part}\. \*\*(.+?)\*\* \((\d+) minutes\):\s(.*?)(?=^\d\. \*\*|^$)", readme, re.M | re.S)
        assert m, f"README: no line for part {part}"
        assert m.group(1).lower() == title.lower() and int(m.group(2)) == total, m.group(0)[:200]
        exercises = [int(n) for n in re.findall(r"\]\(exercises/(\d\d)-[\w-]+\.md\)", m.group(3))]
        on_landing = [int(n) for s in steps for n in re.findall(r"\]\(\.\./exercises/(\d\d)-", s)]
        assert exercises == on_landing, (part, exercises, on_landing)
        row = re.search(rf"^\| {part}: {re.escape(PARTS[part])} \|.*\| (\d+) \|$", _text("exercises/README.md"), re.M)
        assert row and int(row.group(1)) == sum(LABELS[n].minutes for n in exercises), row
    # the command line's list says what its minutes count
    listing = format_list(list_exercises())
    for part in PARTS:
        mine = [ex for ex in EXERCISES if ex.part == part]
        assert f"({len(mine)} exercises, {sum(ex.minutes for ex in mine)} minutes in all by their labels)" in listing


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_no_time_outside_the_blocks(page):
    text = path._BLOCK.sub("", _text(page))
    found = re.findall(r"[^\n]*\b(?:\d+ (?:minutes?|hours?)|(?:one|two|three|four|five) hours?)\b[^\n]*", text)
    assert not found, f"{page} states a time outside docs/learning_path.py's blocks: {found}"


def test_the_set_up_time_was_measured_by_the_committed_command():
    """The times the README and the landing page give come from a measurement of a commit of this
    repository (``python docs/learning_path.py --measure``), each tier timed."""
    m = path.times()
    assert m["command"] == "python docs/learning_path.py --measure"
    for part, keys in (("readme_line", ("install", "quick")), ("slow_tier", ("extras", "slow"))):
        if part not in m and part == "slow_tier":  # measured on its own (--measure slow_tier), where it was
            continue
        commit = m[part]["commit"]
        assert subprocess.run(["git", "cat-file", "-e", commit], cwd=ROOT).returncode == 0, (part, commit)
        assert all(m[part]["seconds"][k] > 0 for k in keys) and m[part]["cpu_seconds"] > 0, part
    total, install, quick, slow = path.setup_minutes()
    for page in ("README.md", "docs/index.md"):
        assert f"the set-up line took {total} minutes" in " ".join(_text(page).split()), page


def test_the_overview_shows_a_self_learner_the_starters(clone_root):
    """The first page of part 1 says how to write the starters, and its commands run as written: the
    export in a fresh folder, then the check of an unfilled starter, which is graded wrong."""
    text = _text("derivations/00-overview.md")
    intro = text.split("## 1. ", 1)[0]
    blocks = re.findall(r"^```bash\n(.*?)^```", intro, re.M | re.S)
    assert [b.strip() for b in blocks] == [".venv/bin/refattn exercises export --student handout/"], blocks
    check = re.search(r"`(\.venv/bin/refattn exercises check ([\w-]+) (handout/[\w.-]+\.py))`", intro)
    assert check, "the overview should say how to check a starter"
    tmp_path = clone_root  # the overview's commands run in a clone's root
    env = {**os.environ, "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run(["bash", "-c", blocks[0].strip()], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / check.group(3)).is_file(), f"the export wrote no {check.group(3)}"
    for ex in EXERCISES:
        assert (tmp_path / "handout" / f"{ex.stem}.py").is_file()
    r = subprocess.run(["bash", "-c", check.group(1)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 1 and "NotImplementedError" in r.stdout, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])


# ------------------------------------------------------------------------------
# Part 3's speed pages quote the committed measurements
# ------------------------------------------------------------------------------

_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _rounds_to(shown: str, value: float) -> bool:
    """``shown``, as a page prints it (``1,068``, ``0.0089``), is ``value`` rounded to the digits shown."""
    digits = shown.replace(",", "")
    unit = 10.0 ** -(len(digits.split(".")[1]) if "." in digits else 0)
    return abs(float(digits) - value) <= unit / 2 * (1 + 1e-9)


def _table(page: str, header: str) -> list[list[str]]:
    """The body rows of the table of ``page`` whose header row starts with ``header``, cell by cell."""
    lines = _text(page).splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    assert start is not None, f"{page}: no table headed {header!r}"
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _results(name: str) -> dict:
    return json.loads((ROOT / "benchmarks" / "results" / name).read_text(encoding="utf-8"))


def _quoted(page: str, pattern: str) -> list[str]:
    """The numbers the one sentence of ``page`` matching ``pattern`` (across line breaks) quotes."""
    m = re.search(pattern, " ".join(_text(page).split()))
    assert m, f"{page}: no sentence matches {pattern!r}"
    return list(m.groups())


D20, D23 = "derivations/20-speed.md", "derivations/23-streaming.md"


def test_derivation_20_quotes_its_committed_measurements():
    ops = _results("ops-avx2.json")
    rows = _table(D20, "| one pass over one slice |")
    assert {r[0] for r in rows} == set(ops["slice_us"]), "the table should show every pass the file measured"
    for name, us, ratio in rows:
        assert _rounds_to(us, ops["slice_us"][name]) and _rounds_to(ratio, ops["slice_over_cheapest"][name]), name
    matmul, six = _quoted(D20, r"took (\d+\.\d) µs: the six products of a step are .*? ≈ (\d+\.\d) ms")
    assert _rounds_to(matmul, ops["matmul_slice_1_thread_us"]) and _rounds_to(six, 96e-3 * ops["matmul_slice_1_thread_us"])

    kernels = _results("kernels-avx2.json")
    rows = _table(D20, "| activation | forward: reference ÷ kernel |")
    assert [r[0] for r in rows] == list(kernels["rows"])
    for name, forward, vjp in rows:
        assert _rounds_to(forward, kernels["rows"][name]["forward_ratio"]), name
        assert _rounds_to(vjp, kernels["rows"][name]["vjp_ratio"]), name

    loop = {(r["what"], r["route"]): r for r in _results("loop-avx2.json")["runs"]}
    for name, blocked, whole in _table(D20, "| | blocked route | whole-batch route |"):
        for cell, route in ((blocked, "blocked"), (whole, "unblocked")):
            faults, kernel_ms = _NUMBER.findall(cell)
            assert _rounds_to(faults, loop[name, route]["page_faults_per_step"]), (name, route)
            assert _rounds_to(kernel_ms, loop[name, route]["system_ms_per_step"]), (name, route)

    avx2 = _results("cpu_attention-avx2.json")
    vs_torch, within, low, high = _quoted(D20, r"where the same script gave (\d\.\d\d)×, (\d\.\d\d)× and "
                                               r"(\d+\.\d)-(\d+\.\d)×")
    backward = [r["autograd_over_analytic_backward"] for r in avx2["rows"].values()]
    assert _rounds_to(vs_torch, avx2["verdict"]["softmax_vs_torch"])
    assert _rounds_to(within, max(r["vs_refattn_softmax"] for r in avx2["rows"].values()))
    assert _rounds_to(low, min(backward)) and _rounds_to(high, max(backward))


def test_derivation_23_quotes_its_committed_measurement():
    run = _results("streaming.json")
    rows = _table(D23, "| n | streaming | dense reference |")
    assert [int(r[0].replace(",", "")) for r in rows] == sorted(int(n) for n in run["rows"])
    for n, *cells in rows:
        for cell, key in zip(cells, ("streaming", "reference", "fast", "torch")):
            measured = run["rows"][n.replace(",", "")][key]
            if cell == "—":
                assert "skipped" in measured or measured.get("time_s") is None, (n, key)
                continue
            seconds, mib = _NUMBER.findall(cell)
            assert _rounds_to(seconds, measured["time_s"]) and _rounds_to(mib, measured["peak_mib"]), (n, key, cell)
    verdict = run["verdict"]["time_n1024"]
    reference, fast = _quoted(D23, r"streaming took (\d\.\d\d)× the dense reference's time and (\d\.\d\d)× the "
                                   r"dense fast path's")
    assert _rounds_to(reference, verdict["streaming_over_reference"]) and _rounds_to(fast, verdict["streaming_over_fast"])
