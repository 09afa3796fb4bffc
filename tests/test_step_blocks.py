"""The derivations' step blocks: there, comparing both sides, a broken one fails, and each
test's output is its own block's.

The blocks themselves run as tests through the repository's ``conftest.py``
(one test per block, the blocks of one markdown-exec session in one
namespace, as the book runs them). This file checks what that cannot: that
every page on the learning path has its blocks, that every block prints and
asserts (so it can fail), that each numbered step of derivation 01's
sections 1 and 2 is followed by a block, that breaking one step's code
makes the suite fail while the unbroken page passes, and that what pytest
captures from each block is what the book shows under it: that block's
output, once, never the output of the blocks above it (a plain run prints
none of it; a block run alone replays its session's earlier blocks quietly).
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from tests.exercises.teaching_checks import teaching

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("refattn_root_conftest", ROOT / "conftest.py")
_root_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_root_conftest)
STEP_PAGES = _root_conftest.STEP_PAGES

DERIVATION_01 = ROOT / "derivations" / "01-reweighted-softmax.md"
EXEC_FENCE = re.compile(r'^```python exec="on"[^\n]*\n(.*?)^```$', re.M | re.S)

#: The step of derivation 01 broken on purpose: Eq. 01.R2, d p_j / d s_k = p_j (delta_jk - p_k) ell'_k,
#: with the -p_k term forgotten (a classic wrong softmax Jacobian).
RIGHT = "rhs = (np.diag(p) - np.outer(p, p)) * dell[None, :]  # Eq. 01.R2"
WRONG = "rhs = np.diag(p) * dell[None, :]  # Eq. 01.R2, the -p_k term forgotten"


def _blocks(path):
    return EXEC_FENCE.findall(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", sorted(p for p in STEP_PAGES if p.parent.name == "derivations"),
                         ids=lambda p: p.name)
def test_every_learning_path_derivation_has_step_blocks_that_print_and_compare(path):
    blocks = _blocks(path)
    assert len(blocks) >= 5, f"{path.name}: {len(blocks)} executed step blocks, expected at least 5"
    for i, code in enumerate(blocks, 1):
        assert "print(" in code, f"{path.name}, step block {i}: prints nothing, so the book shows no output"
        assert re.search(r"^\s*(assert |\w+\.assert_ok\(\))", code, re.M), f"{path.name}, step block {i}: compares nothing, so it cannot fail"
    # the step blocks of a page run in one markdown-exec session, as the tests chain them
    sessions = re.findall(r'^```python exec="on"[^\n]*session="([\w-]+)"', path.read_text(encoding="utf-8"), re.M)
    assert len(sessions) == len(blocks), f"{path.name}: an executed block without a session"
    assert sessions.count(sessions[0]) >= 5, f"{path.name}: the step blocks should share one session"


def _own_outputs(path):
    """What each executed block of ``path`` prints, the blocks of a session run in order in one
    namespace, as markdown-exec runs them for the book (``docs/teaching.py``)."""
    return teaching.derivation_outputs(path)


def _captured(stdout: str) -> dict[int, str]:
    """Block's line -> its captured stdout, from a ``pytest -rP`` report."""
    out = {}
    for m in re.finditer(r"^_+ \[CodeFence#\d+\]\[line:(\d+)\] _+\n-+ Captured stdout call -+\n(.*?)(?=^_{3,} |^=+ |^\d+ (?:passed|failed)|\Z)",
                         stdout, re.M | re.S):
        out[int(m.group(1))] = m.group(2)
    return out


def _fence_lines(path):
    text = path.read_text(encoding="utf-8")
    return [text[:m.start()].count("\n") + 1 for m in EXEC_FENCE.finditer(text)]   # the fence's line, as the collector names it


@pytest.mark.parametrize("path", [ROOT / "derivations" / "00-overview.md", DERIVATION_01], ids=lambda p: p.name)
def test_each_blocks_captured_output_is_its_own(path):
    """As the book shows it: each block's output once, under that block, never its predecessors'."""
    page = path.relative_to(ROOT).as_posix()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rP", "-p", "no:cacheprovider", page], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-3000:]
    captured = _captured(r.stdout)
    expected = dict(zip(_fence_lines(path), _own_outputs(path)))
    assert len(expected) >= 5 and all(expected.values())
    for line, text in expected.items():
        assert captured.get(line, "").strip() == text.strip(), (
            f"{page}, block at line {line}: pytest captured\n{captured.get(line, '')[:1500]}\n"
            f"but the block prints\n{text[:1500]}")
    # and a plain run keeps the blocks' output out of the progress lines
    quiet = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", page], cwd=ROOT,
                           capture_output=True, text=True, timeout=300, check=False)
    assert quiet.returncode == 0 and len(quiet.stdout.splitlines()) <= 4, quiet.stdout[-2000:]


def test_a_block_run_alone_replays_its_session_quietly():
    """``pytest PAGE::[CodeFence#k]...`` runs the session's earlier blocks first, their output discarded."""
    lines = _fence_lines(DERIVATION_01)
    k = 4  # the fourth block uses names (p, rho, act) that only the first three define
    node = f"derivations/{DERIVATION_01.name}::[CodeFence#{k}][line:{lines[k - 1]}]"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rP", "-p", "no:cacheprovider", node], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-3000:]
    assert _captured(r.stdout)[lines[k - 1]].strip() == _own_outputs(DERIVATION_01)[k - 1].strip()


def test_every_numbered_step_of_derivation_01_is_followed_by_a_block():
    text = DERIVATION_01.read_text(encoding="utf-8")
    body = text.split("## 1. The generic form", 1)[1].split("## 3. Every row of the registry", 1)[0]
    steps = [m.start() for m in re.finditer(r"^\*\*Step \d", body, re.M)]
    assert len(steps) == 13, f"sections 1 and 2 of derivation 01 have {len(steps)} numbered steps, expected 13"
    for start, end in zip(steps, steps[1:] + [len(body)]):
        step = body[start:end]
        assert '```python exec="on"' in step, f"no step block after {step.splitlines()[0][:60]!r}"


def _pytest_on(tree, page):
    """Run pytest on ``tree/page`` with the repository's conftest.py, as the suite collects it."""
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", page],
                          cwd=tree, capture_output=True, text=True, timeout=300, check=False)


def _tree(tmp_path, name, text):
    tree = tmp_path / name
    (tree / "derivations").mkdir(parents=True)
    shutil.copy(ROOT / "conftest.py", tree / "conftest.py")
    (tree / "pytest.ini").write_text("[pytest]\nfilterwarnings = error::RuntimeWarning\n", encoding="utf-8")
    (tree / "derivations" / DERIVATION_01.name).write_text(text, encoding="utf-8")
    return tree


def test_a_broken_step_makes_the_suite_fail(tmp_path):
    text = DERIVATION_01.read_text(encoding="utf-8")
    assert text.count(RIGHT) == 1, "the step this test breaks is no longer in derivation 01; update RIGHT"
    page = f"derivations/{DERIVATION_01.name}"

    right = _pytest_on(_tree(tmp_path, "right", text), page)
    assert right.returncode == 0, "the unbroken page should pass:\n" + right.stdout[-3000:]
    assert f"{len(_blocks(DERIVATION_01))} passed" in right.stdout, right.stdout[-2000:]

    broken = _pytest_on(_tree(tmp_path, "broken", text.replace(RIGHT, WRONG)), page)
    assert broken.returncode == 1, "the broken step should fail the run:\n" + broken.stdout[-3000:]
    # the broken block fails (and, continued, the blocks after it); every block before it passes
    fence = text[:text.index(RIGHT)].rindex('```python exec="on"')
    fence_line = text[:fence].count("\n") + 1                  # the fence's line, as the collector names it
    failed = [int(m) for m in re.findall(r"FAILED \S+::\[CodeFence#\d+\]\[line:(\d+)\]", broken.stdout)]
    assert failed, broken.stdout[-3000:]
    assert min(failed) == fence_line, f"the first failing block starts at line {min(failed)}, not {fence_line}"
    assert "AssertionError" in broken.stdout


@pytest.mark.parametrize("page", ["derivations/20-speed.md", "derivations/23-streaming.md"])
def test_a_page_without_step_blocks_says_so_and_names_its_tests(page):
    """``pytest PAGE`` on a page with no step blocks stops with one line that says why there is nothing to
    run and which tests check the page, instead of pytest's bare "not found"."""
    assert (ROOT / page) not in STEP_PAGES and not _blocks(ROOT / page)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", page], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 4, out[-2000:]  # pytest's usage error: nothing ran, and nothing passed
    assert f"{page}: this page has no step blocks" in out and "not found" not in out, out[-2000:]
    named = re.search(r"those it names: \.venv/bin/python -m pytest ((?:tests/\S+\.py ?)+)", out)
    assert named, out[-2000:]
    for test_file in named.group(1).split():
        assert (ROOT / test_file).is_file() and test_file in (ROOT / page).read_text(encoding="utf-8")
