"""Every name that the derivations, the exercises and the notebooks cite in backticks resolves.

A reader who meets `Activation.backward`, `refattn.core.backend.quiet` or
`SignExp.singular_scores` in a derivation should find it in the package;
a name renamed in the code and left in the prose sends them looking for
something that is not there. This test reads every code span of
``derivations/*.md`` (the overview among them), ``exercises/*.md``, the
README and the book's pages (``docs/*.md``) outside their fenced blocks, and
of ``notebooks/*.py`` in their comments and markdown cells, and resolves each span that is a Python name, dotted or not,
with at most a call at its end (``Blocks.scores(rows, cols)``):

* ``refattn.a.b.c``: the longest prefix that imports, then attributes;
* ``Head.a.b``, where ``Head`` is a module of refattn or a class, function or
  constant defined in one (``Activation.backward``, ``scores.Neural.forward``):
  the attributes must exist on one such object, class attributes, or, for a
  class, attributes its methods assign to ``self`` (``Blocks.pair_params``);
* any other name that looks like code (an underscore, a dot or a capital:
  ``_private``, ``CapWords``, ``snake_case``): it must occur as a name or a
  string in the repository's Python (the package, the tests, the benchmarks,
  the notebooks, the book's scripts, the model solutions) or in the page's
  own code blocks: a test's name, a results key, an environment variable.

A name of another library (``numpy.hypot``, ``torch.nn.Linear``) is left
alone, as are plain words (``softmax``, ``strict``) and file names.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.util
import inspect
import io
import pathlib
import pkgutil
import re
import sys
import tokenize

import pytest

import refattn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "docs"))
import cited as from_source  # noqa: E402  (docs/cited.py: names of a module whose optional library is missing)

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = sorted([*(ROOT / "derivations").glob("*.md"), *(ROOT / "exercises").glob("*.md"),
                *(ROOT / "notebooks").glob("[0-9]*.py"), ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
#: Python whose names and strings a cited name may be (results keys, tests, environment variables).
CODE = ["refattn", "tests", "benchmarks", "notebooks", "docs", "instructor/solutions"]
#: Names of other libraries and code, and the names pages give them (``np``, ``xp`` for any array
#: module): OpenBLAS's thread control (derivation 20), Jain & Wallace's repository (derivation 13).
OTHERS = {"np", "anp", "xp", "nn", "torch", "jax", "jnp", "cupy", "scipy", "numpy", "autograd", "math", "decimal",
          "mpmath", "time", "tracemalloc", "os", "sys", "openblas_set_num_threads", "Transparency"}
FILE_SUFFIXES = {"py", "md", "json", "jsonl", "tsv", "csv", "png", "pdf", "txt", "sh", "zip", "ipynb", "yml",
                 "toml", "cff", "html", "npz", "lock"}

_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def prose_and_code(path: pathlib.Path) -> tuple[str, str]:
    """The text in which a page cites names, and the code it runs (whose names it may cite)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":  # a notebook: its markdown cells and comments; all of it is its code
        comments = [tok.string[1:] for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                    if tok.type == tokenize.COMMENT]
        return "\n".join(comments), text
    prose, code, fence = [], [], None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if m and (fence is None or m.group(1)[0] * 3 == fence[:3]):
            fence = None if fence else m.group(1)[0] * 3 + line
            continue
        if fence is None:
            prose.append(line)
        elif fence.lstrip("`~ ").startswith("python"):
            code.append(line)
    return "\n".join(prose), "\n".join(code)


def cited(path: pathlib.Path) -> list[str]:
    """The code spans of ``path``'s prose that are Python names (a trailing call cut off)."""
    prose, _ = prose_and_code(path)
    out = []
    for span in _SPAN.findall(prose):
        name = re.sub(r"\([^()]*\)$", "", span.strip())
        if _NAME.fullmatch(name) and name.rsplit(".", 1)[-1] not in FILE_SUFFIXES:
            out.append(name)
    return out


@functools.cache
def package() -> dict[str, list]:
    """Every module of refattn, and every name defined in one, by its last component."""
    objects: dict[str, list] = {}
    names = [m.name for m in pkgutil.walk_packages(refattn.__path__, "refattn.") if not m.name.endswith("__main__")]
    optional = [m for m in names if from_source.missing_library(m) is not None]  # refattn.torch without PyTorch
    modules = [refattn] + [importlib.import_module(m) for m in names if m not in optional]
    for mod in optional:  # its names, read from its source, stand for themselves
        objects.setdefault(mod.rsplit(".", 1)[-1], []).append(mod)
        for key in from_source.outline(mod):
            objects.setdefault(key, []).append(f"{mod}.{key}")
    for mod in modules:
        objects.setdefault(mod.__name__.rsplit(".", 1)[-1], []).append(mod)
        for key, value in vars(mod).items():
            home = getattr(value, "__module__", None) if not inspect.ismodule(value) else value.__name__
            if key.startswith("__") or not isinstance(home, str):
                home = mod.__name__  # a constant: defined where it is bound
            if home.startswith("refattn"):
                objects.setdefault(key, []).append(value)
    return objects


def _self_attributes(cls) -> set[str]:
    """The attributes a class's methods assign to ``self`` (instance attributes), its own and its bases'."""
    names = set()
    for klass in inspect.getmro(cls):
        try:
            tree = ast.parse(inspect.getsource(klass).lstrip() if klass.__module__.startswith("refattn") else "")
        except (OSError, TypeError, SyntaxError):
            continue
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                  and isinstance(n.value, ast.Name) and n.value.id == "self"}
    return names


def _has(obj, attrs: list[str]) -> bool:
    if isinstance(obj, str):  # a name of a module whose optional library is missing: read from its source
        return bool(from_source.resolves_from_source(f"{obj}.{'.'.join(attrs)}"))
    for i, attr in enumerate(attrs):
        if hasattr(obj, attr):
            obj = getattr(obj, attr)
        elif inspect.isclass(obj) and i == len(attrs) - 1 and attr in _self_attributes(obj):
            return True
        else:
            return False
    return True


def _imports(dotted: str) -> bool:
    """``refattn.a.b.c``: the longest prefix that imports, then the rest as attributes."""
    static = from_source.resolves_from_source(dotted)
    if static is not None:
        return static
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        with contextlib.suppress(ImportError):
            return _has(importlib.import_module(".".join(parts[:k])), parts[k:])
    return False


@functools.cache
def code_words() -> frozenset:
    """Every name and every word inside a string in the repository's Python (comments left out)."""
    words = set()
    for folder in CODE:
        for path in (ROOT / folder).rglob("*.py"):
            if path == pathlib.Path(__file__).resolve():  # its examples of wrong names are no evidence
                continue
            try:
                tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline))
            except (tokenize.TokenError, SyntaxError, UnicodeDecodeError):
                continue
            for tok in tokens:
                if tok.type == tokenize.NAME:
                    words.add(tok.string)
                elif tok.type == tokenize.STRING:
                    words |= set(re.findall(r"\w+", tok.string))
    return frozenset(words)


def _looks_like_code(name: str) -> bool:
    """An underscore, a dot or a capital: not a plain word of the prose (``softmax``, ``strict``)."""
    return "_" in name or "." in name or any(c.isupper() for c in name)


def unresolved(path: pathlib.Path) -> list[str]:
    """The names ``path`` cites that resolve to nothing, each with why."""
    _, code = prose_and_code(path)
    own = set(re.findall(r"\w+", code))
    bad = []
    for name in cited(path):
        head, *rest = name.split(".")
        if head == "refattn":
            if not _imports(name):
                bad.append(f"`{name}` does not import")
        elif head in OTHERS:  # another library's name first: `torch.nn.Linear` is PyTorch's, not refattn.torch's
            continue
        elif head in package():
            if rest and not any(_has(obj, rest) for obj in package()[head]):
                bad.append(f"`{name}`: no {'.'.join(rest)} on refattn's {head}")
        elif _looks_like_code(name) and head not in code_words() and head not in own:
            bad.append(f"`{name}` names nothing in the repository's code")
    return bad


def test_pages_cite_names():
    counts = {p.relative_to(ROOT).as_posix(): len(cited(p)) for p in PAGES}
    assert sum(counts.values()) > 500, counts
    assert counts["derivations/01-reweighted-softmax.md"] > 40


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_cited_name_resolves(page):
    bad = unresolved(page)
    assert not bad, f"{page.relative_to(ROOT)}: " + "; ".join(bad)


def test_a_name_that_is_not_in_the_package_is_caught(tmp_path):
    """The slips a reader trips on: a private name that was renamed, a class attribute that lives
    elsewhere, a module function misspelt; beside them names that do resolve."""
    page = tmp_path / "page.md"
    wrong = ["_Unnormalised", "_quiet", "SignExp.singular_score", "refattn.core.backend.quite",
             "Neural._hidden_inputs", "Score.forward", "blocks.score_vjp(rows, cols, ds)"]
    right = ["Unnormalised", "refattn.core.backend.quiet", "SignExp.singular_scores", "Blocks.pair_params",
             "Blocks.scores(rows, cols)", "SigSoftmax.half_ell", "numpy.hypot", "softmax", "REFATTN_SMALL",
             "test_vjp_three_ways", "activations.py"]
    page.write_text("Prose with " + ", ".join(f"`{n}`" for n in wrong + right) + ".\n\n```python\nmy_var = 1\n```\n"
                    "and `my_var`, which the page's own code defines.\n", encoding="utf-8")
    bad = unresolved(page)
    assert len(bad) == len(wrong), bad
    for name, why in zip(wrong, bad):
        assert why.startswith(f"`{name.split('(')[0]}`"), (name, why)


def test_a_module_whose_library_is_missing_is_read_from_its_source(monkeypatch):
    """Where PyTorch is not installed (CI), ``refattn.torch`` does not import; its names are then read from
    its source, and a name that is not there still fails."""
    outline = from_source.outline("refattn.torch")
    assert {"activation", "attention", "Attention"} <= set(outline) and "forward" in outline["Attention"]
    monkeypatch.setattr(from_source, "missing_library", lambda module: "torch" if module == "refattn.torch" else None)
    assert from_source.resolves_from_source("refattn.torch.activation") is True
    assert from_source.resolves_from_source("refattn.torch.Attention.forward") is True
    assert from_source.resolves_from_source("refattn.torch.activations") is False
    assert from_source.resolves_from_source("refattn.torch.Attention.backwards") is False
    assert from_source.resolves_from_source("refattn.core.attention.attention") is None  # imports: resolved as usual
