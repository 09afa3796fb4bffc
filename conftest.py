"""pytest, at the repository's root: the derivations' step blocks are tests.

On the learning path (derivations 00, 01, 02, 03 and 22) every numbered step
is followed by a short block, fenced ```` ```python exec="on" session="..." ````,
that runs the step on the page's one small example, prints both sides of the
step's equation and asserts that they agree. The book shows each block with
its output: markdown-exec runs it while the page is built, the blocks of one
``session`` in one namespace. Here each block is one test, collected with
pytest-markdown-docs's own machinery (``extract_fence_tests`` and its test
item), and a block continues the blocks above it in the same session, as in
the book (pytest-markdown-docs's ``continuation``, added to the fence here
so that the page itself carries only what markdown-exec reads). A block
whose two sides disagree fails its test; ``tests/test_step_blocks.py`` shows
that a broken step is caught. ``docs/verify.md``'s worked example is
collected the same way.
"""

from __future__ import annotations

import pathlib
import re

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

_EXEC_FENCE = re.compile(r'^(```python exec="on"[^\n]*?session="([\w-]+)"[^\n]*)$', re.M)


def chain_sessions(text: str) -> str:
    """``text`` with ``continuation`` added to every executed fence whose
    session is that of the executed fence before it (line numbers unchanged)."""
    out, last, pos = [], None, 0
    for m in _EXEC_FENCE.finditer(text):
        out.append(text[pos:m.end()])
        if m.group(2) == last:
            out.append(" continuation")
        last, pos = m.group(2), m.end()
    out.append(text[pos:])
    return "".join(out)


def _step_block_file():
    from pytest_markdown_docs.plugin import (  # noqa: PLC0415
        FenceSyntax,
        MarkdownInlinePythonItem,
        MarkdownTextFile,
        extract_fence_tests,
    )

    class StepBlockFile(MarkdownTextFile):
        """A page's python blocks, one test each, sessions chained as in the book."""

        def collect(self):
            text = chain_sessions(self.path.read_text(encoding="utf-8"))
            parser = self.config.hook.pytest_markdown_docs_markdown_it()
            for i, test in enumerate(extract_fence_tests(parser, text, start_line_offset=0, source_path=self.path,
                                                         markdown_type="md", fence_syntax=FenceSyntax.default)):
                yield MarkdownInlinePythonItem.from_parent(self, name=f"[CodeFence#{i + 1}][line:{test.start_line}]",
                                                           test_definition=test)

    return StepBlockFile


def pytest_collect_file(file_path, parent):
    if pathlib.Path(file_path) in STEP_PAGES and not parent.config.option.markdowndocs:
        return _step_block_file().from_parent(parent, path=pathlib.Path(file_path))
    return None
