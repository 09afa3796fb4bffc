"""pytest, at the repository's root: the derivations' step blocks are tests.

On the learning path (derivations 00, 01, 02, 03 and 22) every numbered step
is followed by a short block, fenced ```` ```python exec="on" ... continuation ````,
that runs the step on the page's one small example, prints both sides of the
step's equation and asserts that they agree. The book shows each block with
its output (markdown-exec runs it while the page is built, all blocks of a
page in one ``session``); here each block is one test, collected by
pytest-markdown-docs's own collector, and ``continuation`` runs it after the
blocks above it on the same page, as the book's session does. A block whose
two sides disagree fails its test (``tests/test_step_blocks.py`` shows that a
broken step is caught). ``docs/verify.md``'s worked example is collected the
same way.
"""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent

#: The pages whose python blocks run as tests (a block fenced ``python notest`` does not).
STEP_PAGES = frozenset(ROOT / p for p in (
    "derivations/00-overview.md",
    "derivations/01-reweighted-softmax.md",
    "derivations/02-scores.md",
    "derivations/03-proposition-1.md",
    "derivations/22-central-differences.md",
    "docs/verify.md",
))


def pytest_collect_file(file_path, parent):
    if pathlib.Path(file_path) in STEP_PAGES and not parent.config.option.markdowndocs:
        from pytest_markdown_docs.plugin import MarkdownTextFile  # noqa: PLC0415

        return MarkdownTextFile.from_parent(parent, path=pathlib.Path(file_path))
    return None
