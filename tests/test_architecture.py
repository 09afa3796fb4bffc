"""The house's shape, checked: rooms on floors, no import loop, short functions, thin studies.

``refattn`` is built in rooms on floors (``docs/map.md``): the textbook
``core`` at the bottom; ``theory``, ``fast`` and the Verify door (``check``,
``custom``) on the floor above it, with ``plots``; the frameworks (``torch``,
``jax``) on a half floor above, as they take the Verify door's activations;
``training`` above those;
``studies`` above that, the graded ``exercises`` above the studies; the
command line on top. A module may import from its own room or from a lower
floor, never from a higher floor nor from another room of its own floor, and
the modules import one another in no loop. Every import counts, those inside
a function too. These tests read the source (``ast``); they import nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "refattn"

#: Each room (a subpackage or a top-level module) and its floor; a room not listed fails the test.
FLOORS = {
    "core": 0,
    "theory": 1, "fast": 1, "verify": 1, "plots": 1,
    "frameworks": 1.5,  # refattn.torch, refattn.jax: core's functions in PyTorch and JAX, define_activation's too
    "training": 2,
    "studies": 3,
    "exercises": 3.5,  # the graders read the studies' and the theory's functions
    "cli": 4,
}

#: Top-level modules that share a room: the Verify door is ``check`` and ``custom``; the frameworks are
#: ``torch``, ``jax``, ``flex`` (attention on PyTorch's FlexAttention) and what they share (``frameworks``),
#: above the Verify door because they take its activations (``define_activation``'s) and below training,
#: which needs none of them; ``python -m refattn`` is the command line.
ROOM_OF_MODULE = {"check": "verify", "custom": "verify", "torch": "frameworks", "jax": "frameworks",
                  "flex": "frameworks", "frameworks": "frameworks", "__main__": "cli"}

#: Known loops, allowed until they end (none now).
ALLOWED_LOOPS = []


def _modules():
    """``{dotted name: path}`` of every module of the package (a package's ``__init__`` by its own name)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name, path):
    """The refattn modules that ``name`` imports, anywhere in its file (a name imported from a module
    counts as that module; ``from .x import y`` as ``x.y`` where that is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "refattn"}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target.split(".")[0] != "refattn":
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.add(full if full in MODULES else target)
    return {m for m in found if m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def room(module):
    """The room of a module: its subpackage (``refattn.fast.kernels`` is in ``fast``) or, for a top-level
    module, :data:`ROOM_OF_MODULE` or its own name; ``None`` for the package itself."""
    parts = module.split(".")
    if len(parts) == 1:
        return None  # refattn/__init__.py: the front door, which loads what it names lazily
    return ROOM_OF_MODULE.get(parts[1], parts[1])


def test_every_room_has_a_floor():
    rooms = {room(m) for m in MODULES} - {None}
    assert rooms <= set(FLOORS), f"rooms without a floor in FLOORS: {sorted(rooms - set(FLOORS))}"


def test_the_front_door_imports_nothing_eagerly():
    """``refattn/__init__.py`` loads what it names on first use (PEP 562), so importing any room loads
    nothing else through the package; an import of ``refattn`` itself therefore adds no edge."""
    assert GRAPH["refattn"] == set(), GRAPH["refattn"]


def test_no_import_runs_up_a_floor_or_across_a_floor():
    bad = []
    for module, targets in GRAPH.items():
        here = room(module)
        if here is None:
            continue
        for target in targets:
            there = room(target)
            if there is None or there == here:
                continue
            if FLOORS[there] >= FLOORS[here]:
                bad.append(f"{module} ({here}, floor {FLOORS[here]}) imports {target} ({there}, floor {FLOORS[there]})")
    assert not bad, "imports that run up or across a floor:\n" + "\n".join(sorted(bad))


def _strongly_connected(graph):
    """Tarjan's algorithm: the strongly connected components of ``graph`` with more than one module."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_loop():
    loops = [sorted(c) for c in _strongly_connected(GRAPH) if c not in ALLOWED_LOOPS]
    assert not loops, f"modules that import one another in a loop: {loops}"


def test_the_loop_finder_finds_a_loop():
    """The check above can fail: a made-up graph with a loop of three is found, and one without is not."""
    assert _strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert _strongly_connected({"a": {"b"}, "b": {"c"}, "c": set()}) == []


# --------------------------------------------------------------------------
# Short functions
# --------------------------------------------------------------------------

#: The longest a function of the package may be, docstring included.
MAX_FUNCTION_LINES = 60

#: The functions still over that length, at most ten, by ``file:name``: each may shrink or go, none may grow
#: past the hundred lines every function once had to keep within, and no other may join them.
LONGER: set[str] = set()


def _long_functions(path, limit=MAX_FUNCTION_LINES):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(node.name, node.lineno, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > limit]


def test_no_function_is_longer_than_sixty_lines():
    assert len(LONGER) <= 10
    bad, seen = [], set()
    for path in MODULES.values():
        rel = path.relative_to(ROOT).as_posix()
        for name, line, n in _long_functions(path):
            seen.add(f"{rel}:{name}")
            if f"{rel}:{name}" not in LONGER or n > 100:
                bad.append(f"{rel}:{line} {name} ({n} lines)")
    assert not bad, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(bad)
    assert not LONGER - seen, f"now within {MAX_FUNCTION_LINES} lines, so off the list: {sorted(LONGER - seen)}"


def test_the_length_rule_can_fail(tmp_path):
    long = tmp_path / "long.py"
    long.write_text("def f():\n" + "    x = 1\n" * 60 + "    return x\n")
    assert _long_functions(long) == [("f", 1, 62)]
    assert _long_functions(long, limit=62) == []


# --------------------------------------------------------------------------
# Thin studies: a study takes from another only its run_* function, its constants and its settings
# --------------------------------------------------------------------------


def _allowed_from_a_study(name):
    """``run_*``, a constant (``PAPER``, ``DEFAULTS``) or the settings class."""
    return name.startswith("run_") or name == "Settings" or (name.isupper() and name[0].isalpha())


def _taken_from_other_studies(module, path, studies):
    """``(other study, name)`` for every name ``module`` takes from another study: imported by name, or
    read as an attribute of an imported study module (``from . import lm``; ``lm.Settings``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = "refattn.studies"
    taken, aliases = [], {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        target = (package if node.level == 1 and not node.module else
                  f"{package}.{node.module}" if node.level == 1 else node.module or "")
        for alias in node.names:
            if target == package and f"{package}.{alias.name}" in studies:  # from . import lm
                aliases[alias.asname or alias.name] = f"{package}.{alias.name}"
            elif target in studies and target != module:  # from .lm import DEFAULTS, run_lm
                taken.append((target, alias.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            if aliases[node.value.id] != module:
                taken.append((aliases[node.value.id], node.attr))
    return taken


def test_a_study_takes_from_another_only_its_runner_constants_and_settings():
    from refattn.studies import STUDIES  # noqa: PLC0415  (the registry: the standard library only)

    studies = {f"refattn.studies.{m}" for m in STUDIES.values()}
    bad = []
    for module in sorted(studies):
        for other, name in _taken_from_other_studies(module, MODULES[module], studies):
            if not _allowed_from_a_study(name):
                bad.append(f"{module} takes {name} from {other}")
    assert not bad, "helpers taken from another study (move them to refattn/studies/helpers.py, " \
                    "refattn/studies/statistics.py or refattn/training/):\n" + "\n".join(bad)


def test_the_study_rule_can_fail(tmp_path):
    study = tmp_path / "a.py"
    study.write_text("from .b import run_b, PAPER, Settings, helper\nfrom . import c\nx = c.Settings, c.private\n")
    taken = _taken_from_other_studies("refattn.studies.a", study,
                                      {"refattn.studies.a", "refattn.studies.b", "refattn.studies.c"})
    assert sorted(n for _, n in taken if not _allowed_from_a_study(n)) == ["helper", "private"]


# --------------------------------------------------------------------------
# Tests laid out as the package
# --------------------------------------------------------------------------

TESTS = ROOT / "tests"

#: The tests of the whole, at the top of tests/: the book and its links, the command line's fuzz and its
#: runs, the docs' commands and notebooks, the backends' parity, the benchmarks' scripts, the front door's
#: modules (refattn/custom.py, refattn/check.py, refattn/plots.py), the results page against its data, the
#: names the pages cite, the learning path's times, and this file.
CROSS_CUTTING = {
    "test_architecture.py", "test_book.py", "test_links.py", "test_slides.py", "test_slide_fonts.py",
    "test_front_door.py",
    "test_equation_index.py", "test_step_blocks.py", "test_notebooks_and_cli.py", "test_cli_hostile.py",
    "test_run_safety.py", "test_gpu_parity.py", "test_gpu_check.py", "test_non_finite.py", "test_bench_cli.py",
    "test_bench_speed_scripts.py", "test_define_activation.py", "test_plots.py", "test_results_page.py",
    "test_users_files_and_signals.py", "test_cited_names.py", "test_learning_path.py", "test_verify.py",
}


def test_tests_are_laid_out_as_the_package():
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    subpackages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert folders <= subpackages, f"test folders that are no room of refattn: {sorted(folders - subpackages)}"
    assert {"core", "theory", "fast", "training", "studies"} <= folders
    top = {p.name for p in TESTS.glob("test_*.py")}
    assert top <= CROSS_CUTTING, f"tests of one room belong in its folder: {sorted(top - CROSS_CUTTING)}"
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert len(names) == len(set(names)), "two test files share a name (pytest imports them by name)"


def test_every_runner_of_a_study_takes_its_settings_object():
    """Each parameter of a study is written once, in its ``Settings``: its ``run_*`` functions take the
    settings object first, and besides it only the run's context (``progress``, ``on_result``, ``command``)."""
    from refattn.studies import STUDIES  # noqa: PLC0415

    context = {"progress", "on_result", "command"}
    bad = []
    for name in sorted(set(STUDIES.values())):
        tree = ast.parse(MODULES[f"refattn.studies.{name}"].read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("run_"):
                positional = [a.arg for a in node.args.posonlyargs + node.args.args]
                keywords = {a.arg for a in node.args.kwonlyargs}
                if positional != ["settings"] or not keywords <= context:
                    bad.append(f"refattn/studies/{name}.py {node.name}({', '.join(positional)}; {sorted(keywords)})")
    assert not bad, "runners that take their parameters one by one:\n" + "\n".join(bad)
