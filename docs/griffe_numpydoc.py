"""A griffe extension: refattn's numpydoc docstrings, read as mkdocstrings reads Markdown.

The docstrings are written for people and for ``help()``: numpydoc sections,
then often a paragraph of prose ("Source: ...", "Derivation: ...", "Raises
``TypeError`` when ..."), reStructuredText roles (``:func:`check_int```) and
simple tables (``=====  =====``). numpydoc would read a paragraph after a
``Parameters`` section as more parameters; so would griffe. Before the
docstrings are parsed, this extension

* opens a ``Notes`` section where a paragraph of prose follows the items of
  a section (an unindented line that is not ``name : type``, or that the
  next line continues, unindented);
* turns ``:role:`x``` into the code span ``x``;
* puts each reST simple table in a ``text`` block, so its columns line up;
* ends a paragraph that introduces a literal block with ``:`` instead of ``::``.

The source files are not changed.
"""

from __future__ import annotations

import re

import griffe

_ITEM_SECTIONS = {"parameters", "other parameters", "attributes", "returns", "yields", "receives",
                  "raises", "warns", "warnings", "methods"}
_ANY_SECTION = _ITEM_SECTIONS | {"notes", "examples", "see also", "references", "note", "example"}
_ITEM = re.compile(r"^\*{0,2}[A-Za-z_][\w.]*(\s*,\s*\*{0,2}[A-Za-z_][\w.]*)*(\s+:\s*.*)?$")
_ROLE = re.compile(r":(?:func|class|meth|attr|mod|data|obj|exc|const):`~?([^`]+)`")
_TABLE_RULE = re.compile(r"^\s*=+(\s+=+)+\s*$")


def _is_header(lines: list[str], i: int) -> bool:
    return (i + 1 < len(lines) and lines[i].strip().lower() in _ANY_SECTION
            and re.fullmatch(r"-{3,}", lines[i + 1].strip() or "x") is not None)


def _open_notes(lines: list[str]) -> list[str]:
    out: list[str] = []
    section = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if _is_header(lines, i):
            section = line.strip().lower()
            out += [line, lines[i + 1]]
            i += 2
            continue
        prev_blank = not out or not out[-1].strip()
        starts_prose = (section in _ITEM_SECTIONS and prev_blank and line.strip() and not line[0].isspace()
                        and (not _ITEM.match(line.strip())
                             or (i + 1 < len(lines) and lines[i + 1].strip() and not lines[i + 1][0].isspace())))
        if starts_prose:
            out += ["Notes", "-----"]
            section = "notes"
        out.append(line)
        i += 1
    return out


def _fence_tables(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        if _TABLE_RULE.match(lines[i]):
            rules = [j for j in range(i, len(lines)) if _TABLE_RULE.match(lines[j])]
            end = rules[2] if len(rules) >= 3 else rules[-1]
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            out += [f"{indent}```text", *lines[i:end + 1], f"{indent}```"]
            i = end + 1
            continue
        out.append(lines[i])
        i += 1
    return out


def rewrite(text: str) -> str:
    """The docstring ``text`` as the book renders it."""
    text = _ROLE.sub(r"`\1`", text)
    text = re.sub(r"(\S)::\n(\s*\n)", r"\1:\n\2", text)
    lines = _fence_tables(text.splitlines())
    return "\n".join(_open_notes(lines))


class RefattnDocstrings(griffe.Extension):
    def on_object(self, *, obj, **kwargs):  # noqa: ARG002
        if obj.docstring is not None and obj.path.startswith("refattn"):
            obj.docstring.value = rewrite(obj.docstring.value)
