"""pytest, at the repository's root: the derivations' step blocks are tests.

On the learning path (derivations 00, 01, 02, 03 and 22) every numbered step
is followed by a short block, fenced ```` ```python exec="on" session="..." ````,
that runs the step on the page's one small example, prints both sides of the
step's equation and asserts that they agree. The book shows each block with
its output: markdown-exec runs it while the page is built, the blocks of one
``session`` in one namespace. Here each block is one test, found by
pytest-markdown-docs's parser (``extract_fence_tests``), and runs as in the
book: in its session's namespace, after the blocks above it in the same
session. A block is run once: when the tests run in the page's order, each
test executes its own block only, so what pytest captures from it (shown
with ``-rP``, or printed with ``-s``) is that block's output and nothing
else, as in the book. A test run alone (``-k``) first replays the earlier
blocks of its session with their output discarded. A block whose two sides
disagree fails its test, and so does every later block of its session
("an earlier block ... fails"); ``tests/test_step_blocks.py`` shows that a
broken step is caught and that each test's output is its block's own.
``docs/verify.md``'s worked example is collected the same way; a python
block with no session runs alone. A page named on the command line that has
no step blocks (``pytest derivations/20-speed.md``) stops the run with one
line that says so, which pages have them, and which tests the page names.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parent

#: The pages whose python blocks run as tests (a block fenced ``python notest`` does not).
STEP_PAGES = frozenset(ROOT / p for p in (
    "derivations/00-overview.md",
    "derivations/01-reweighted-softmax.md",
    "derivations/02-scores.md",
    "derivations/03-proposition-1.md",
    "derivations/22-central-differences.md",
    "derivations/24-softmax-kernels.md",
    "derivations/25-normalisers.md",
    "docs/verify.md",
))

_SESSION = re.compile(r'^```python exec="on"[^\n]*?session="([\w-]+)"')


class EarlierBlockFailed(Exception):
    """A block of the same session, above this one, fails: this one cannot run as the book runs it."""


def _run(source: str, path: pathlib.Path, namespace: dict) -> None:
    exec(compile(source, str(path), "exec", dont_inherit=True), namespace)  # noqa: S102


class StepBlock(pytest.Item):
    """One python block of a page: its session (``None``: it runs alone) and its place in it."""

    def __init__(self, *, definition, chain, **kwargs):
        super().__init__(**kwargs)
        self.definition, self.chain = definition, chain
        self.add_marker("markdown-docs")

    def runtest(self):
        self.parent.run_block(self)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, EarlierBlockFailed):
            return str(excinfo.value)
        from pytest_markdown_docs._runners import get_runner  # noqa: PLC0415

        return get_runner(None).repr_failure(self.definition, excinfo, style)

    def reportinfo(self):
        return self.path, self.definition.start_line, self.name


class StepBlockFile(pytest.File):
    """A page's python blocks, one test each, the blocks of a session sharing one namespace."""

    def collect(self):
        from pytest_markdown_docs.plugin import FenceSyntax, extract_fence_tests  # noqa: PLC0415

        text = self.path.read_text(encoding="utf-8")
        lines = text.splitlines()
        parser = self.config.hook.pytest_markdown_docs_markdown_it()
        self.chains: dict[str, list[StepBlock]] = {}
        self.state: dict[str, tuple[dict, int]] = {}   # session -> (namespace, blocks run in it)
        for i, test in enumerate(extract_fence_tests(parser, text, start_line_offset=0, source_path=self.path,
                                                     markdown_type="md", fence_syntax=FenceSyntax.default)):
            m = _SESSION.match(lines[test.start_line - 1])
            item = StepBlock.from_parent(self, name=f"[CodeFence#{i + 1}][line:{test.start_line}]",
                                         definition=test, chain=m.group(1) if m else None)
            if item.chain is not None:
                self.chains.setdefault(item.chain, []).append(item)
            yield item

    def run_block(self, item: StepBlock) -> None:
        if item.chain is None:
            _run(item.definition.source, self.path, types.ModuleType("fence").__dict__)
            return
        blocks = self.chains[item.chain]
        index = blocks.index(item)
        namespace, done = self.state.get(item.chain, (None, -1))
        if done != index:  # not run in order: replay the earlier blocks, their output discarded
            namespace = types.ModuleType("fence").__dict__
            for earlier in blocks[:index]:
                try:
                    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                        _run(earlier.definition.source, self.path, namespace)
                except Exception as e:  # noqa: BLE001 - reported as this block's failure
                    self.state[item.chain] = (None, -1)
                    raise EarlierBlockFailed(
                        f"{self.path.name}: the block at line {earlier.definition.start_line}, earlier in "
                        f"session {item.chain!r}, fails ({type(e).__name__}: {e}), so the block at line "
                        f"{item.definition.start_line}, which continues it, cannot run") from None
        self.state[item.chain] = (None, -1)
        _run(item.definition.source, self.path, namespace)
        self.state[item.chain] = (namespace, index + 1)


_TESTS_NAMED = re.compile(r"\btests/[\w/]+\.py\b")


def no_step_blocks(page: pathlib.Path) -> str:
    """What to say when ``page``, a markdown page without step blocks, is given to pytest."""
    named = [t for t in dict.fromkeys(_TESTS_NAMED.findall(page.read_text(encoding="utf-8"))) if (ROOT / t).is_file()]
    pages = ", ".join(sorted(p.relative_to(ROOT).as_posix() for p in STEP_PAGES))
    return (f"{page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else page}: this page has no step "
            f"blocks, so pytest has nothing of it to run (the pages whose steps run as tests: {pages}). "
            + (f"The tests of what it states are those it names: .venv/bin/python -m pytest {' '.join(named)}"
               if named else "It names no test file."))


def pytest_configure(config):
    if config.option.markdowndocs:  # pytest-markdown-docs collects every page itself
        return
    for arg in config.args:
        page = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if page.suffix == ".md" and page.is_file() and page not in STEP_PAGES:
            raise pytest.UsageError(no_step_blocks(page))


def pytest_collect_file(file_path, parent):
    if pathlib.Path(file_path) in STEP_PAGES and not parent.config.option.markdowndocs:
        return StepBlockFile.from_parent(parent, path=pathlib.Path(file_path))
    return None


@pytest.fixture
def clone_root(tmp_path):
    """A folder that stands for a clone's root, as the pages' commands are run in: ``.venv`` is this test's
    environment, and the folders a command reads from a clone (the statements, the model solutions and
    answer keys, the derivations) are this checkout's. An installed (not editable) package finds them only
    there."""
    import sys  # noqa: PLC0415

    (tmp_path / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    for folder in ("instructor", "exercises", "derivations"):
        (tmp_path / folder).symlink_to(ROOT / folder, target_is_directory=True)
    return tmp_path
