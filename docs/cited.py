"""Names in refattn's modules that need an optional library, read from their source where it is missing.

``refattn.torch`` imports PyTorch and ``refattn.jax`` imports JAX (the
``torch`` and ``jax`` extras). Where one is not installed, the module does not
import, yet the pages still cite its names (``refattn.torch.activation``,
``Attention``). The book's build (``docs/hooks.py``) and the test of cited
names (``tests/test_cited_names.py``) then resolve those names from the
module's source instead: its top-level definitions, assignments and
imports, and the members each of its classes defines. A name that is in
neither the module nor its source fails as before; a module that fails to
import for any other reason (a bug in refattn) raises as before.
"""

from __future__ import annotations

import ast
import functools
import importlib
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def source_of(module: str) -> pathlib.Path | None:
    """The file of ``module`` (``refattn.a.b``) in this checkout, or None."""
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@functools.cache  # a module that fails to import is tried again on every import: once is enough
def missing_library(module: str) -> str | None:
    """The library outside refattn whose absence stops ``module`` importing (``"torch"``), or None
    when it imports. Any other failure to import is raised."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] != "refattn":
            return exc.name
        raise
    return None


def _assigned(nodes) -> set[str]:
    names = set()
    for node in nodes:
        if isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


@functools.cache
def outline(module: str) -> dict[str, set[str]]:
    """``{name: members}`` of ``module`` read from its source: every top-level name, with the members of
    a class (its methods, nested classes and class attributes; empty for anything else)."""
    tree = ast.parse(source_of(module).read_text(encoding="utf-8"))
    out = {name: set() for name in _assigned(tree.body)}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = _assigned(node.body) | {
                n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = set()
    return out


def resolves_from_source(dotted: str) -> bool | None:
    """For ``refattn.mod.a.b`` whose module does not import for want of an optional library: whether
    ``a`` (and ``b``, a class's member) is in the module's source. None where no such module is missing
    a library (resolve it by importing, as usual)."""
    parts = dotted.split(".")
    for k in range(len(parts), 1, -1):
        module = ".".join(parts[:k])
        if source_of(module) is None:
            continue
        if missing_library(module) is None:
            return None
        rest, names = parts[k:], outline(module)
        if not rest:
            return True
        if rest[0] not in names:
            return False
        return len(rest) == 1 or rest[1] in names[rest[0]] or not names[rest[0]]
    return None
