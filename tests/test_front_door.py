"""The front door: a short README, a landing page for learners, commands that
run as written, and user-facing text that a reader can follow.

* ``README.md`` has at most 200 lines, and both set-up commands and the first
  link of the learning path in its first 40; it cites the four papers with
  title, authors, year and identifier;
* the book's home page is ``docs/index.md`` (not the README), with a figure
  that exists, the three ways in and the three parts with their times;
* no internal work item ("issue 19") and no path outside the repository in
  the README, the derivations, the notebooks, the pages of ``docs/`` or
  ``refattn --help``;
* every command in a ``bash`` block of the README, the landing page and the
  pages it sends a beginner to runs as written in a fresh shell after the
  README's set-up: in a temporary copy of the repository with ``.venv``
  pointing at this test's environment, with nothing on ``PATH`` but the
  system's, at the small size (``REFATTN_SMALL=1``). The set-up lines
  themselves are checked for their shape (the extras they name exist) and
  the test command for being what CI runs; the book's build is run by
  ``tests/test_book.py``.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib

import pytest

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LANDING = ROOT / "docs" / "index.md"
SETUP = ('python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/refattn check',
         'python3 -m venv .venv && .venv/bin/pip install ".[test]" && .venv/bin/python -m pytest')
#: The pages whose commands run: the README, the landing page and the two doors it opens.
COMMAND_PAGES = [README, LANDING, ROOT / "docs" / "verify.md", ROOT / "docs" / "teach.md"]
#: User-facing text: no work items, no paths outside the repository.
USER_FACING = sorted([README, ROOT / "benchmarks" / "README.md", ROOT / "mkdocs.yml",
                      *(ROOT / "derivations").glob("*.md"), *(ROOT / "notebooks").glob("*.py"),
                      *(ROOT / "docs").rglob("*.md")])
WORK_ITEM = re.compile(r"issues? ?#?[0-9]|issue-[0-9]", re.I)
OUTSIDE = re.compile(r"\.\./shared|shared/seeds|shared/data|/work/|/root/|/tmp/")


def test_readme_is_short_with_the_setup_and_the_way_in_on_top():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; at most 200"
    top = "\n".join(lines[:40])
    for command in SETUP:
        assert command in top, f"README's first 40 lines should hold {command!r}"
    assert "(derivations/00-overview.md)" in top, "the learning path's first link belongs in the first 40 lines"


def test_readme_cites_each_paper_with_title_authors_year_and_identifier():
    section = README.read_text(encoding="utf-8").split("## The papers", 1)[1].split("\n## ", 1)[0]
    rows = {r.split("|")[1].strip(): r for r in section.splitlines() if r.startswith("| ") and "---" not in r}
    for name, ident in (("TanhMax", "doi:10.6339/24-JDS1134"), ("Cog", "arXiv:2411.07176"),
                        ("NeuralAttn", "arXiv:2502.17206"), ("Expressive", "arXiv:2407.18601")):
        assert name in rows, f"README's reference table has no row {name}"
        assert ident in rows[name] and re.search(r"\| 20\d\d \|", rows[name]), rows[name]


def test_the_books_home_is_a_landing_page_with_a_figure_and_the_three_parts():
    hooks = (ROOT / "docs" / "hooks.py").read_text(encoding="utf-8")
    assert 'add("index.md"' not in hooks, "the book's home must be docs/index.md, not a copy of the README"
    text = LANDING.read_text(encoding="utf-8")
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)
    assert images and all((LANDING.parent / i).is_file() for i in images), images
    assert all(door in text for door in ("**Learn**", "**Verify your own formula**", "**Teach**"))
    parts = re.findall(r"^### Part (\d): .*\((\d+) minutes\)$", text, re.M)
    assert [p for p, _ in parts] == ["1", "2", "3"], parts
    part1 = text.split("### Part 1", 1)[1].split("### Part 2", 1)[0]
    order = [part1.index(x) for x in ("00-overview.md", "01-reweighted-softmax.md", "notebooks/01_activations_tour.py",
                                      "exercises/01-softmax-vjp.md")]
    assert order == sorted(order), "part 1: overview, then derivation 01, then notebook 01, then exercises"


@pytest.mark.parametrize("path", USER_FACING, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_work_items_and_no_paths_outside_the_repository(path):
    text = path.read_text(encoding="utf-8")
    for i, line in enumerate(text.splitlines(), 1):
        assert not WORK_ITEM.search(line), f"{path.relative_to(ROOT)}:{i} names a work item: {line.strip()[:100]}"
        assert not OUTSIDE.search(line), f"{path.relative_to(ROOT)}:{i} names a path outside the repository"


def test_no_work_items_in_the_command_lines_help():
    r = subprocess.run([sys.executable, "-m", "refattn", "--help"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert r.returncode == 0, r.stderr
    assert not WORK_ITEM.search(r.stdout), r.stdout


# --------------------------------------------------------------------------
# every command runs as written
# --------------------------------------------------------------------------


def _commands(path):
    """The lines of the page's bash blocks (comments and blank lines left out)."""
    text = path.read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"^[ \t]*```bash\n(.*?)^[ \t]*```", text, re.S | re.M):
        for line in block.splitlines():
            line = line.split(" # ")[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


COMMANDS = sorted({(p.relative_to(ROOT).as_posix(), c) for p in COMMAND_PAGES for c in _commands(p)})
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
             ["optional-dependencies"])
INSTALL = re.compile(r'^(?:python3 -m venv \.venv && )?\.venv/bin/pip install (\.|"\.\[([\w,-]+)\]"|[\w-]+)$')


def _split(command):
    """The parts of ``a && b && c`` that install, and the rest, which runs."""
    parts = command.split(" && ")
    setup = [p for p in parts if p == "python3 -m venv .venv" or p.startswith(".venv/bin/pip install ")]
    return setup, [p for p in parts if p not in setup]


def test_commands_were_found_and_all_use_the_virtual_environment():
    assert len(COMMANDS) >= 8, COMMANDS
    for page, command in COMMANDS:
        setup, rest = _split(command)
        for part in setup:
            m = INSTALL.match(part) or re.fullmatch(r"python3 -m venv \.venv", part)
            assert m, f"{page}: {part!r} is not a set-up line of the README's shape"
            if m.re is INSTALL and m.group(2):
                missing = set(m.group(2).split(",")) - EXTRAS
                assert not missing, f"{page}: {part!r} names extras that pyproject.toml lacks: {missing}"
        for part in rest:
            assert part.startswith((".venv/bin/", "source .venv/bin/activate")), (
                f"{page}: {part!r} would need an activated environment; write .venv/bin/...")


def test_ci_runs_the_readme_test_line_first_in_a_fresh_environment():
    """CI's first step is the README's line, as written, after removing any environment, with nothing installed
    before it: no test passes in CI only because an earlier step installed something."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    lines = [ln.strip() for ln in ci.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    first_install = next(i for i, ln in enumerate(lines) if "pip install" in ln or ln.startswith("python3 -m venv"))
    assert lines[first_install] == SETUP[1], f".ci/run installs {lines[first_install]!r} before the README's line"
    assert lines.index("rm -rf .venv") < first_install, ".ci/run does not start from a fresh environment"


@pytest.fixture(scope="module")
def fresh_checkout(tmp_path_factory):
    """A copy of the repository's files with ``.venv`` pointing at this test's environment."""
    dest = tmp_path_factory.mktemp("checkout")
    try:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                               capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()
                 and not {".git", ".venv", "site", "figures", "__pycache__"} & set(p.relative_to(ROOT).parts)]
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    (dest / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    return dest


def _run(command, cwd):
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8",
           "MPLBACKEND": "Agg", "REFATTN_SMALL": "1"}
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.mark.parametrize("page, command", COMMANDS, ids=[f"{p}: {c[:60]}" for p, c in COMMANDS])
def test_command_runs_as_written(page, command, fresh_checkout):
    setup, rest = _split(command)
    runnable = " && ".join(rest)
    if not rest:
        pytest.skip("a set-up line: its shape is checked above")
    if runnable.startswith(".venv/bin/python -m pytest") and not runnable.endswith(".md"):
        pytest.skip("the test suite itself: what CI runs (checked above)")
    if runnable == ".venv/bin/mkdocs build --strict":
        assert '"mkdocs", "build", "--strict"' in (ROOT / "tests" / "conftest.py").read_text(encoding="utf-8")
        pytest.skip("the book's build: tests/conftest.py's site fixture runs it, for tests/test_book.py")
    r = _run(runnable, fresh_checkout)
    assert r.returncode == 0, f"{page}: `{runnable}` failed ({r.returncode}):\n{(r.stderr or r.stdout)[-3000:]}"
    notebook = re.search(r"\.venv/bin/python (notebooks/[\w]+\.py)$", runnable)
    if notebook:  # a notebook run as a script says where its figures went, and they are there
        m = re.search(r"figures are saved in (\S+)", r.stdout)
        assert m, f"{notebook.group(1)} run as a script did not say where its figures went"
        assert list(pathlib.Path(m.group(1)).glob(pathlib.Path(notebook.group(1)).stem[:2] + "_*.png"))
