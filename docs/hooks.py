"""MkDocs hooks that assemble the refattn book from the repository.

Nothing in ``docs/`` duplicates the repository's text. At build time this
module adds to the site, as generated files:

* ``papers.md``: the README's section "The papers", the one reference table
  (the landing page, ``docs/index.md``, and the other pages of ``docs/`` are
  ordinary pages of the book);
* ``derivations/*.md``: every derivation, with the figures of ``FIGURES``
  embedded where the derivation states what they show;
* ``notebooks/*.md``: every ``notebooks/*.py`` (jupytext percent format),
  executed in its own process with ``REFATTN_SMALL=1`` (``REFATTN_BOOK_SMALL=0``
  runs them all at full size, ``REFATTN_BOOK_SMALL=slides`` those that the
  slide decks cite), with printed output and saved figures under each
  cell, the source ``.py`` and a Jupyter ``.ipynb`` (made by jupytext) beside it;
* ``exercises/*.md``: the statements and their index (the model solutions live in
  ``instructor/solutions/``, never in the book);
* ``api/*.md``: one mkdocstrings page per module of ``API_MODULES``; a
  listed module that does not exist stops the build;
* ``assets/mathjax/tex-svg-full.js``: MathJax 3 from the django-static-mathjax
  wheel, so that math is typeset with no network;
* ``problems/part-N.md``: a problem set per part of the learning path, and,
  where a Chromium executable is found, the PDFs of the problem sets and of
  the slide decks (``docs/slides/part-N.md``, rendered with their own
  template), printed after the site is written: ``docs/teaching.py``.

While pages are rendered, code spans that name a repository path
(``derivations/01-reweighted-softmax.md``, ``notebooks/01_activations_tour.py``,
``refattn/core/activations.py``) or a documented object
(``refattn.core.activations.Softmax``) become links. Links are written as they
resolve in the repository, so that every page reads the same on GitHub: the
pages of ``docs/`` link ``../derivations/01-reweighted-softmax.md``,
``../notebooks/01_activations_tour.py`` (the notebook's executed page in the
book) and ``../README.md#the-papers`` (the page ``papers.md``), and each link
becomes the book's path to the page that renders its target
(``_fix_links``); a link to a file that is not in the site becomes plain
text. A code span that
names a repository path that does not exist, a test
(``tests/test_x.py::test_name``) that is not in its file, or a ``refattn.``
name that does not import, is a warning, so ``mkdocs build --strict`` fails
on it.

The derivations' step blocks (fences marked ``exec="on"``) are run by the
markdown-exec plugin while the page is rendered; the book shows each with its
output, and a block that raises is a warning, so the strict build fails.

Run as a script, ``python docs/hooks.py NOTEBOOK OUTDIR`` executes one
notebook and writes ``OUTDIR/cells.json``; the build runs it once per
notebook, two at a time.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cited  # docs/cited.py: names of modules whose optional library is missing, read from their source
import teaching  # docs/teaching.py: the slide decks, the problem sets and their PDFs
from refattn.exercises.pdf import find_chromium

ROOT = Path(__file__).resolve().parents[1]

#: The modules that get an API page, in reading order (names below ``refattn``).
#: A module listed here that does not exist stops the build: a module that is
#: moved or renamed must be renamed here too, or its page would silently vanish.
API_MODULES = [
    "core.activations", "core.scores", "core.attention", "core.gradcheck", "core.backend",
    "custom",
    "theory.proposition1", "theory.properties", "theory.proposition2", "theory.signexp_at_zero",
    "fast.kernels", "fast.streaming",
    "training.layers", "training.fast_layers", "training.optim", "training.train", "training.classifier",
    "training.runs",
    "training.models.polarity", "training.models.nt", "training.models.decoder",
    "training.tasks.polarity", "training.tasks.nt", "training.tasks.sst2",
]

#: The pages of ``docs/`` in the navigation, after the landing page.
DOOR_PAGES = ["verify.md", "frameworks.md", "teach.md"]
REFERENCE_PAGES = ["results.md", "map.md", "papers.md", "cli.md", "cluster.md", "performance.md", "gpu.md"]

#: Figures embedded in derivations, where the derivation states what the
#: figure shows: derivation file -> [(section heading, figure names)]. Each
#: figure goes at the end of the section whose heading starts with the text
#: given; the notebook that draws it is found from the build's own run.
FIGURES: dict[str, list[tuple[str, list[str]]]] = {
    "23-streaming.md": [
        ("2. The online update", ["13_one_row_block_by_block"]),
        ("8. Cost, and one thread for BLAS", ["13_memory_and_time"]),
    ],
    "01-reweighted-softmax.md": [
        ("2. The Jacobian and the single VJP", ["01_tanhmax_jacobian"]),
        ("3. Every row of the registry", ["01_g_h_rho_ell", "01_weights_bars"]),
        ("4.1 signexp", ["01_signexp_spike"]),
    ],
    "03-proposition-1.md": [
        ("2. Proof, one step at a time", ["02_prop1_formula_vs_exact"]),
        ("4. When the assumption fails", ["02_shared_projections", "02_cross_terms_vs_dim"]),
    ],
    "04-score-dynamics-closed-forms.md": [
        ("2. TanhMax: its Eqs. 7", ["02_tanhmax_eq7_sign"]),
        ("4. What each says", ["02_which_scores_rise"]),
    ],
    "05-proposition-2.md": [
        ("3. (a)", ["05_tanhmax_image_n2"]),
        ("4. (b)", ["05_closure_paths", "05_closure_gap"]),
        ("5. (c)", ["05_log_rank"]),
    ],
    "06-four-properties.md": [
        ("2. Property 1", ["05_g_and_half_turn"]),
        ("3.1 The criterion", ["05_log_abs_g"]),
        ("3.2 A second measurement", ["07_bottleneck_rank"]),
        ("7. Comparison with the paper", ["07_table_vs_paper"]),
    ],
    "07-expressive-geometry.md": [
        ("1. The two weights", ["08_weight_vs_angle", "08_polar"]),
        ("2. The contrast", ["08_contrast"]),
        ("4. High dimension", ["08_cosine_histograms", "08_high_dim_scatter"]),
    ],
    "08-neural-attention-expressivity.md": [
        ("1. The diagonal picture", ["08_diagonal_surfaces"]),
        ("3. A relation that is not bilinear", ["08_fixed_query_slices"]),
        ("4. What the MLP adds", ["08_fit_scatter"]),
    ],
    "09-signexp-at-zero.md": [("8. The side-by-side table", ["06_three_estimates", "06_spike_vs_eps"])],
    "10-nt-tasks.md": [("1. The task family", ["04_nt_series"]), ("5. Finding every cycle", ["04_nt_cycles"])],
    "12-score-dynamics-experiment.md": [
        ("2. Trajectories", ["03_score_dynamics"]),
        ("4. A symmetry of the classifier", ["03_polarity_fig2", "03_opposite_fraction"]),
    ],
    "13-interpretability.md": [("6. Our numbers beside Table 1", ["03_interpret_table1"])],
    "15-nt-experiments.md": [
        ("5. Fig. 4", ["04_nt_fig4", "04_nt_attention_log10"]),
        ("11.1 Fig. 4", ["14_sensitivity_fig4"]),
        ("11.2 Fig. 3", ["14_sensitivity_fig3", "14_sensitivity_fig3_30k", "14_sensitivity_fig3_long",
                         "14_sensitivity_fig3_52", "14_sensitivity_fig3_16"]),
        ("11.3 Fig. 6", ["14_sensitivity_fig6", "14_sensitivity_fig6_long"]),
        ("11.4 Fig. 7", ["14_sensitivity_fig7", "14_sensitivity_fig7_long", "14_sensitivity_fig7_128"]),
        ("11.5 Fig. 5", ["14_sensitivity_fig5"]),
        ("11.6 The score scale", ["14_sensitivity_fig3_beta"]),
        ("11.7 float32", ["14_sensitivity_fig3_float64"]),
        ("11.8 N16T5", ["14_sensitivity_fig5_256", "14_sensitivity_fig5_256_lr032"]),
        ("11.9 The verdicts at a glance", ["14_verdict_map"]),
    ],
    "14-sst2.md": [("9. A sweep", ["14_sst2_sweep"])],
    "16-rank-collapse.md": [
        ("2. The mean is not the minimiser", ["09_frontier"]),
        ("7. What we measured", ["09_rank_collapse", "09_rank_collapse_rescaled"]),
    ],
    "17-neural-attention-cost.md": [
        ("3. What chunking buys", ["10_chunk_size"]),
        ("5. Measured", ["10_neural_cost_vs_n", "10_max_n_vs_budget"]),
    ],
    "18-decoder-and-cog.md": [("3. Cog's JAX example", ["11_cog_example_weights"])],
    "19-toy-lm.md": [("4. Results", ["11_lm_curves", "11_cog_trained_weights"]),
                     ("8. A tuned learning rate", ["14_lm_gaps"])],
    "20-speed.md": [
        ("4. Linear attention by associativity", ["12_linear_associativity"]),
        ("6. The result", ["12_benchmark"]),
        ("8. The NT training step", ["14_nt_speed"]),
    ],
}

_RUN_TIMEOUT_S = 900


# --------------------------------------------------------------------------
# Executing one notebook (in a child process)
# --------------------------------------------------------------------------

def run_notebook(src: str, out: str) -> None:
    """Execute the code cells of ``src`` in order in one namespace, as a kernel
    would, and write ``out/cells.json``: each cell with its source and, for
    code cells, what it printed and the figures it saved (``REFATTN_FIGDIR``)."""
    import jupytext  # noqa: PLC0415

    name = Path(src).name
    nb = jupytext.read(src)
    namespace = {"__name__": "__main__"}
    seen: set[str] = set()
    cells = []
    t0 = time.perf_counter()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            cells.append({"type": "markdown", "source": cell.source})
            continue
        if cell.cell_type != "code":
            continue
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            exec(compile(cell.source, f"{name}[cell {i}]", "exec"), namespace)  # noqa: S102
        new = sorted((p for p in Path(out).glob("*.png") if p.name not in seen),
                     key=lambda p: (p.stat().st_mtime_ns, p.name))
        seen.update(p.name for p in new)
        cells.append({"type": "code", "source": cell.source, "output": buf.getvalue(),
                      "figures": [p.name for p in new]})
    result = {"cells": cells, "seconds": time.perf_counter() - t0}
    (Path(out) / "cells.json").write_text(json.dumps(result), encoding="utf-8")


# --------------------------------------------------------------------------
# The build
# --------------------------------------------------------------------------

_state: dict = {}


def _log():
    import logging  # noqa: PLC0415

    return logging.getLogger("mkdocs.hooks.refattn")


def _notebooks() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("[0-9]*.py"))


def _derivations() -> list[Path]:
    return sorted((ROOT / "derivations").glob("[0-9]*.md"))


def _exercises() -> list[Path]:
    return sorted((ROOT / "exercises").glob("[0-9]*.md"))


def _module_file(module: str) -> Path:
    path = ROOT / "refattn" / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _api_modules() -> list[str]:
    """``API_MODULES``, each checked to exist: a missing one is an error, not a skip."""
    from mkdocs.exceptions import PluginError  # noqa: PLC0415

    missing = [m for m in API_MODULES if not _module_file(m).is_file()]
    if missing:
        raise PluginError(f"API_MODULES in docs/hooks.py names modules that do not exist: "
                          f"{', '.join('refattn.' + m for m in missing)} (moved or renamed? update the list)")
    return list(API_MODULES)


def on_config(config):
    """The navigation, from what is in the repository now (a new notebook or
    derivation appears without editing mkdocs.yml)."""
    # the step blocks of the derivations (markdown-exec) import this checkout's refattn
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    config["nav"] = [
        {"Home": "index.md"},
        {"Derivations": ["derivations/00-overview.md", "derivations/index.md"]
            + [f"derivations/{p.name}" for p in _derivations() if not p.name.startswith("00-")]},
        {"Notebooks": [f"notebooks/{p.stem}.md" for p in _notebooks()]},
        {"Exercises": ["exercises/README.md"] + [f"exercises/{p.name}" for p in _exercises()]},
        {"Verify and teach": DOOR_PAGES},
        {"Slides and problem sets": [{f"Slides, part {n}": uri} for n, uri in teaching.DECKS.items()]
            + [{f"Problem set, part {n}": f"problems/part-{n}.md"} for n in teaching.DECKS]},
        {"Results and reference": REFERENCE_PAGES},
        {"API reference": ["api/index.md"] + [f"api/{m}.md" for m in _api_modules()]},
    ]
    return config


def _execute_all() -> dict[str, dict]:
    """Run every notebook in its own process, two at a time; return its cells."""
    from mkdocs.exceptions import PluginError  # noqa: PLC0415

    setting = os.environ.get("REFATTN_BOOK_SMALL", "1")
    small = teaching.small_notebooks(setting, [p.stem for p in _notebooks()])  # a bad value stops here
    tmp = Path(tempfile.mkdtemp(prefix="refattn-book-"))
    _state["tmp"] = tmp
    env = {**os.environ, "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    _state["small"] = small

    def one(path: Path):
        out = tmp / path.stem
        out.mkdir()
        r = subprocess.run([sys.executable, __file__, str(path), str(out)], cwd=ROOT,
                           env={**env, "REFATTN_FIGDIR": str(out),
                                "REFATTN_SMALL": "1" if path.stem in small else "0"},
                           capture_output=True, text=True, timeout=_RUN_TIMEOUT_S, check=False)
        if r.returncode != 0:
            raise PluginError(f"notebooks/{path.name} failed while building the book:\n"
                              + (r.stderr or r.stdout)[-4000:])
        return path.stem, json.loads((out / "cells.json").read_text(encoding="utf-8"))

    t0 = time.perf_counter()
    workers = max(1, min(len(_notebooks()), os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        results = dict(pool.map(one, _notebooks()))
    _log().info("refattn book: executed %d notebooks in %.1f s (REFATTN_BOOK_SMALL=%s: %s)",
                len(results), time.perf_counter() - t0, setting, teaching.BOOK_SIZES[setting])
    return results


def _fence(text: str, lang: str = "") -> str:
    """A fenced block that no backtick run inside ``text`` can close."""
    ticks = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}\n"


def _notebook_page(stem: str, run: dict) -> str:
    parts = []
    note = (f'!!! info "Executed when this book was built"\n'
            f"    Source: [`notebooks/{stem}.py`]({stem}.py), a jupytext percent-format script, and the same as a\n"
            f"    Jupyter notebook: [`{stem}.ipynb`]({stem}.ipynb). After the README's set-up, run it with\n"
            f"    `.venv/bin/python notebooks/{stem}.py` (its figures go to `figures/`), or make the\n"
            f"    `.ipynb` yourself with `.venv/bin/jupytext --to notebook notebooks/{stem}.py` (jupytext\n"
            f"    comes with the test extra, the README's second set-up line).\n"
            f"    The code below ran {teaching.size_words(stem in _state['small'])} in "
            f"{run['seconds']:.1f} s; the output and figures under each cell are what it printed and drew.\n")
    placed = False
    for cell in run["cells"]:
        if cell["type"] == "markdown":
            parts.append(cell["source"].strip() + "\n")
            if not placed:  # the note goes under the notebook's title cell
                parts.append(note)
                placed = True
            continue
        if not placed:
            parts.append(note)
            placed = True
        parts.append(_fence(cell["source"], "python"))
        if cell["output"].strip() or cell["figures"]:
            out = ['<div class="nb-output" markdown>\n']
            if cell["output"].strip():
                out.append(_fence(cell["output"], "text"))
            for fig in cell["figures"]:
                out.append(f"![{fig[:-4]}]({stem}/{fig})\n")
            out.append("</div>\n")
            parts.append("\n".join(out))
    return "\n".join(parts)


def _ipynb(path: Path) -> str:
    """The notebook ``path`` (jupytext percent format) as Jupyter's ``.ipynb``, unexecuted."""
    import jupytext  # noqa: PLC0415

    return jupytext.writes(jupytext.read(path), fmt="ipynb")


def _readme_section(title: str) -> str:
    """The README's section ``## title`` (to the next ``## ``), for a page of the book."""
    from mkdocs.exceptions import PluginError  # noqa: PLC0415

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if not m:
        raise PluginError(f"README.md has no section '## {title}' (docs/hooks.py makes a page of it)")
    return m.group(1)


def _api_page(module: str, citing: list[str]) -> str:
    lines = [f"# refattn.{module}\n"]
    if citing:
        links = ", ".join(f"[{c[:-3]}](../derivations/{c})" for c in citing)
        lines.append(f"Derivations that use this module: {links}.\n")
    lines.append(f"::: refattn.{module}\n")
    return "\n".join(lines)


def _api_index(modules: list[str]) -> str:
    rows = ["# API reference\n",
            "The reference modules, generated from their numpydoc docstrings. Each page says "
            "which derivations use the module; each derivation links the functions it names "
            "to their entries here.\n",
            "| module | what it holds |", "|---|---|"]
    for m in modules:
        doc = (importlib.import_module(f"refattn.{m}").__doc__ or "").strip().splitlines()
        first = doc[0].strip().rstrip(".") if doc else ""
        rows.append(f"| [`refattn.{m}`]({m}.md) | {first.replace('|', '&#124;')} |")
    return "\n".join(rows) + "\n"


def on_files(files, config):
    """Add every page, figure and script of the book as a generated file."""
    from mkdocs.exceptions import PluginError  # noqa: PLC0415
    from mkdocs.structure.files import File  # noqa: PLC0415

    def add(src_uri, **kw):
        files.append(File.generated(config, src_uri, **kw))

    add("papers.md", content="# The papers\n" + _readme_section("The papers"))
    for p in sorted((ROOT / "derivations").glob("*.md")):
        add(f"derivations/{p.name}", content=p.read_text(encoding="utf-8"))
    for p in [ROOT / "exercises" / "README.md", *_exercises()]:
        add(f"exercises/{p.name}", content=p.read_text(encoding="utf-8"))

    chromium = find_chromium()  # before the notebooks run: a missing one that is required stops here
    if chromium is None:
        why = "no Chromium executable (apt-get install chromium, or set REFATTN_CHROMIUM)"
        if teaching.required():
            raise PluginError(f"REFATTN_EXTRAS_REQUIRED=1 but {why}: the problem sets and slides need it for "
                              "their PDFs")
        _log().info("refattn book: %s; the problem-set and slide PDFs are skipped", why)
    _state["chromium"] = chromium

    runs = _execute_all()
    _state["figures"] = {}
    for stem, run in runs.items():
        add(f"notebooks/{stem}.md", content=_notebook_page(stem, run))
        add(f"notebooks/{stem}.py", abs_src_path=str(ROOT / "notebooks" / f"{stem}.py"))
        add(f"notebooks/{stem}.ipynb", content=_ipynb(ROOT / "notebooks" / f"{stem}.py"))
        section = ""
        for cell in run["cells"]:
            heading = re.search(r"^#{1,6} (.+)$", cell["source"], re.M) if cell["type"] == "markdown" else None
            section = heading.group(1).strip() if heading else section
            for fig in cell.get("figures", []):
                add(f"notebooks/{stem}/{fig}", abs_src_path=str(_state["tmp"] / stem / fig))
                _state["figures"][fig[:-4]] = (stem, section)

    modules = _api_modules()
    for m in modules:
        pattern = re.compile(r"refattn[./]" + r"[./]".join(map(re.escape, m.split("."))) + r"\b")
        citing = [p.name for p in _derivations() if pattern.search(p.read_text(encoding="utf-8"))]
        add(f"api/{m}.md", content=_api_page(m, citing))
    add("api/index.md", content=_api_index(modules))

    # the problem sets, and the PDFs of problem sets and decks (printed after the build, where a
    # Chromium is found: a placeholder here, so that links to them resolve)
    _state["printed"] = teaching.Printed(runs, small=_state["small"])
    for n in teaching.DECKS:
        add(f"problems/part-{n}.md", content=teaching.problem_set(n, pdf=chromium is not None))
    if chromium:
        for uri in [*teaching.DECKS.values(), *(f"problems/part-{n}.md" for n in teaching.DECKS)]:
            add(uri[:-3] + ".pdf", content=b"")

    import mathjax  # noqa: PLC0415  (the django-static-mathjax wheel)

    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    add("assets/mathjax/tex-svg-full.js", abs_src_path=str(es5 / "tex-svg-full.js"))
    _state["files"] = {f.src_uri for f in files}
    _state["modules"] = set(modules)
    return files


# --------------------------------------------------------------------------
# Rewriting each page's markdown
# --------------------------------------------------------------------------

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")
_LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(([^()\s]*)\)")
_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def _outside_fences(md: str, fn) -> str:
    """Apply ``fn`` to the text outside fenced code blocks."""
    out, chunk, fence = [], [], None
    for line in md.splitlines(keepends=True):
        m = _FENCE.match(line)
        if fence is None and m:
            out.append(fn("".join(chunk)))
            chunk, fence = [line], m.group(2)[0] * len(m.group(2))
        elif fence is not None:
            chunk.append(line)
            if line.strip().startswith(fence) and line.strip() == line.strip()[0] * len(line.strip()):
                out.append("".join(chunk))
                chunk, fence = [], None
        else:
            chunk.append(line)
    out.append(fn("".join(chunk)) if fence is None else "".join(chunk))
    return "".join(out)


def _rel(page_uri: str, target_uri: str) -> str:
    return os.path.relpath(target_uri, os.path.dirname(page_uri) or ".").replace(os.sep, "/")


def _documented_module(parts: list[str]) -> str | None:
    """The longest prefix of ``refattn.a.b.c`` (as parts) that has an API page."""
    for k in range(len(parts) - 1, 1, -1):
        name = ".".join(parts[1:k])
        if name in _state.get("modules", ()):
            return name
    return None


def _resolves(dotted: str) -> bool:
    """True when ``refattn.MODULE.NAME[.ATTR]`` is an object that the API pages
    render (as griffe sees it, the way mkdocstrings does): in a documented
    module, defined there, public, with a docstring."""
    parts = dotted.split(".")
    if len(parts) < 3 or _documented_module(parts) is None or any(p.startswith("_") for p in parts):
        return False
    if "griffe" not in _state:
        import griffe  # noqa: PLC0415

        _state["griffe"] = griffe.load("refattn", search_paths=[str(ROOT)], allow_inspection=False)
    try:
        obj = _state["griffe"][".".join(parts[1:])]
    except (KeyError, ValueError, AttributeError):
        return False
    return not obj.is_alias and obj.docstring is not None


_REPO_PATH = re.compile(r"((?:refattn|derivations|notebooks|exercises|tests|benchmarks|docs)/[\w./-]*\w)"
                        r"(?:::(\w+))?(?:#[\w-]+)?")


def _names_an_object(dotted: str) -> bool:
    """True when ``refattn.a.b.c`` imports (the longest module prefix) and the rest are attributes; in a
    module that needs a library not installed here (``refattn.torch``), when its source defines them."""
    static = cited.resolves_from_source(dotted)
    if static is not None:
        return static
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        try:
            for name in parts[k:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def _check_paths(text: str, page_uri: str) -> None:
    """Warn (an error under ``--strict``) about a code span that names a
    repository path that does not exist, a test that is not in its file, or a
    ``refattn.`` name that does not import."""

    def one(seg: str) -> str:
        for span in _CODE.findall(seg):
            if re.fullmatch(r"refattn(\.\w+)+", span) and not _names_an_object(span):
                _log().warning("%s: `%s` names nothing in refattn", page_uri, span)
            m = _REPO_PATH.fullmatch(span)
            if not m:
                continue
            path, test = m.group(1), m.group(2)
            if not (ROOT / path).exists():
                _log().warning("%s: `%s` names %s, which is not in the repository", page_uri, span, path)
            elif test and not re.search(rf"^(?:async )?def {test}\(", (ROOT / path).read_text(encoding="utf-8"),
                                        re.M):
                _log().warning("%s: `%s`: %s has no test %s", page_uri, span, path, test)
        return seg

    _outside_fences(text, one)


def _link_code_spans(text: str, page_uri: str) -> str:
    files = _state["files"]

    def path_target(path: str):
        if path.startswith("derivations/") and path in files:
            return path
        if path.startswith("exercises/") and path.endswith(".md") and path in files:
            return path
        m = re.fullmatch(r"notebooks/([0-9][\w-]*)\.py", path)
        if m and f"notebooks/{m.group(1)}.md" in files:
            return f"notebooks/{m.group(1)}.md"
        m = re.fullmatch(r"refattn/([\w/]+?)(?:/__init__)?\.py", path)
        if m and f"api/{m.group(1).replace('/', '.')}.md" in files:
            return f"api/{m.group(1).replace('/', '.')}.md"
        return None

    def one(seg: str) -> str:
        # leave code spans that are already inside a link's text alone
        protected = [(m.start(), m.end()) for m in _LINK.finditer(seg)]

        def repl(m):
            if any(a <= m.start() < b for a, b in protected):
                return m.group(0)
            code = m.group(1)
            mp = re.match(r"((?:derivations|notebooks|exercises|refattn)/[\w./-]+?)(#[\w-]+)?$", code)
            if mp and (target := path_target(mp.group(1))):
                return f"[{m.group(0)}]({_rel(page_uri, target)}{mp.group(2) or ''})"
            md = re.match(r"refattn(?:\.\w+)+", code)
            if md and _resolves(md.group(0)):
                return f"[{m.group(0)}][{md.group(0)}]"
            return m.group(0)

        return _CODE.sub(repl, seg)

    return _outside_fences(text, one)


def _book_uri(repo_path: str, page_uri: str) -> str | None:
    """The page or file of the book that renders the repository file ``repo_path``
    (a path from the repository's root), or None where the book has none.

    ``docs/x`` is the book's ``x``; a notebook's ``.py`` is its executed page
    (except on that page itself, whose note links the source); a module of
    ``refattn`` with an API page is that page; ``derivations/``, ``exercises/``
    and the other generated files keep their paths; a folder is its
    ``index.md`` or ``README.md``."""
    files = _state["files"]
    for cand in (repo_path, f"{repo_path}/index.md", f"{repo_path}/README.md"):
        uri = cand[len("docs/"):] if cand.startswith("docs/") else cand
        nb = re.fullmatch(r"notebooks/([0-9][\w-]*)\.py", uri)
        if nb and f"notebooks/{nb.group(1)}.md" in files and page_uri != f"notebooks/{nb.group(1)}.md":
            return f"notebooks/{nb.group(1)}.md"
        api = re.fullmatch(r"refattn/([\w/]+?)(?:/__init__)?\.py", uri)
        if api and f"api/{api.group(1).replace('/', '.')}.md" in files:
            return f"api/{api.group(1).replace('/', '.')}.md"
        if uri in files:
            return uri
    return None


def _fix_links(text: str, page_uri: str, repo_dir: str) -> str:
    """Links written as they resolve in the repository become links to the
    book's pages: each relative link is resolved from ``repo_dir``, the
    folder that holds the page's source in the repository (``docs/`` for the
    pages of ``docs/``, so that they can link ``../derivations/...md`` and
    ``../notebooks/...py`` and work on GitHub too), and mapped by
    :func:`_book_uri`. The README's section "The papers" is the page
    ``papers.md``. A link to a file the book does not hold becomes plain text."""

    def repl(m):
        bang, label, target = m.groups()
        if bang or not target or re.match(r"[a-z]+:", target) or target.startswith("#"):
            return m.group(0)
        path, _, anchor = target.partition("#")
        repo_path = os.path.normpath(os.path.join(repo_dir, path)).replace(os.sep, "/")
        if repo_path == "README.md" and anchor == "the-papers":  # the README's reference table
            return f"[{label}]({_rel(page_uri, 'papers.md')})"
        uri = _book_uri(repo_path, page_uri)
        if uri is None:
            return label
        return f"[{label}]({_rel(page_uri, uri)}{'#' + anchor if anchor else ''})"

    return _outside_fences(text, lambda seg: _LINK.sub(repl, seg))


def _embed_figures(text: str, name: str) -> str:
    """Put the figures of ``FIGURES[name]`` at the end of their sections, each
    with a caption naming the notebook section that draws it."""
    from mkdocs.exceptions import PluginError  # noqa: PLC0415

    for heading, figs in FIGURES.get(name, []):
        lines = text.splitlines(keepends=True)
        start = next((i for i, ln in enumerate(lines) if re.match(r"#{1,6} ", ln)
                      and ln.lstrip("#").strip().startswith(heading)), None)
        if start is None:
            raise PluginError(f"FIGURES: derivations/{name} has no heading starting {heading!r}")
        level = len(lines[start]) - len(lines[start].lstrip("#"))
        end = next((i for i in range(start + 1, len(lines))
                    if re.match(r"#{1,%d} " % level, lines[i])), len(lines))
        while end > start + 1 and lines[end - 1].strip() in ("", "---"):
            end -= 1
        blocks = []
        for fig in figs:
            if fig not in _state["figures"]:
                raise PluginError(f"FIGURES: no notebook drew {fig!r} (wanted in derivations/{name})")
            stem, section = _state["figures"][fig]
            blocks.append(f'<figure class="book-figure" markdown>\n'
                          f"![{fig}](../notebooks/{stem}/{fig}.png)\n\n"
                          f"<figcaption markdown>`{fig}`: drawn by [notebook {stem[:2]}](../notebooks/{stem}.md)"
                          f" (section \"{section}\") when the book was built, "
                          f"{'at the small size the tests use' if stem in _state['small'] else 'at full size'}."
                          f"</figcaption>\n</figure>\n")
        lines.insert(end, "\n\n" + "\n".join(blocks) + "\n")
        text = "".join(lines)
    return text


_DISPLAY_LINE = re.compile(r"^\s*\$\$.*\$\$\s*$")


def _split_displays(text: str) -> str:
    """Blank lines around each line that is one ``$$...$$`` display: GitHub
    shows such a line as a display wherever it stands (inside a paragraph,
    after another display); arithmatex needs it to be a block of its own."""
    lines = text.split("\n")
    out: list[str] = []
    for i, line in enumerate(lines):
        if _DISPLAY_LINE.match(line):
            if out and out[-1].strip():
                out.append("")
            out.append(line)
            if i + 1 < len(lines) and lines[i + 1].strip():
                out.append("")
        else:
            out.append(line)
    return "\n".join(out)


_STEP_BLOCK = re.compile(r'^(```python exec="on"[^\n]*\n.*?^```)[ \t]*$', re.M | re.S)


def _wrap_step_blocks(markdown: str) -> str:
    """Each executed block (markdown-exec: its source, then what it printed) in
    a ``<div class="step-block">``, which book.css styles and the browser test counts."""
    return _STEP_BLOCK.sub(lambda m: f'<div class="step-block" markdown>\n\n{m.group(1)}\n\n</div>', markdown)


def on_page_markdown(markdown, page, config, files):
    uri = page.file.src_uri
    if uri.startswith("api/"):
        return markdown
    if uri in teaching.DECKS.values():  # a slide deck: its own template, directives, one <section> per slide
        page.meta["template"] = "slides.html"
        markdown = teaching.deck_markdown(teaching.resolve(markdown, uri, _state["figures"], _state["printed"],
                                                           pdf=_state["chromium"] is not None))
    if not _state.get("chromium"):  # no PDFs in this build: no links to them either
        markdown = teaching.drop_pdf_links(markdown)
    markdown = _wrap_step_blocks(markdown)
    if uri.startswith("derivations/"):
        markdown = _embed_figures(markdown, Path(uri).name)
    _check_paths(markdown, uri)
    # the pages of docs/ are in docs/ in the repository; every generated page sits where its source does
    repo_dir = os.path.dirname(("docs/" if page.file.src_dir is not None else "") + uri)
    markdown = _fix_links(markdown, uri, repo_dir)
    markdown = _outside_fences(markdown, _split_displays)
    return _link_code_spans(markdown, uri)


_DOC_CITE = re.compile(r"(<a\b[^>]*>\s*)?<code>(derivations/[0-9][\w-]*\.md)</code>")


def on_page_content(html, page, config, files):
    """In API pages, the derivation paths that docstrings cite become links."""
    if not page.file.src_uri.startswith("api/"):
        return html

    def repl(m):
        if m.group(1) or m.group(2) not in _state["files"]:
            if not m.group(1):
                _log().warning("%s: a docstring cites %s, which does not exist", page.file.src_uri, m.group(2))
            return m.group(0)
        href = _rel(page.file.src_uri, m.group(2))[:-3] + ".html"
        return f'<a href="{href}"><code>{m.group(2)}</code></a>'

    return _DOC_CITE.sub(repl, html)


def on_post_build(config):
    tmp = _state.pop("tmp", None)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    if _state.get("chromium"):
        t0 = time.perf_counter()
        pages = [uri[:-3] + ".html" for uri in [*teaching.DECKS.values(),
                                                 *(f"problems/part-{n}.md" for n in teaching.DECKS)]]
        teaching.print_pdfs(_state["chromium"], Path(config["site_dir"]), pages)
        _log().info("refattn book: printed %d PDFs (problem sets and slides) in %.1f s", len(pages),
                    time.perf_counter() - t0)


if __name__ == "__main__":
    run_notebook(sys.argv[1], sys.argv[2])
