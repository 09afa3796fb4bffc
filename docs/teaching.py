"""Slide decks and problem sets for the refattn book, built with it (used by ``docs/hooks.py``).

**Slide decks.** ``docs/slides/part-N.md`` is the deck of part N of the
learning path: markdown, one slide after each line ``---`` (outside code
fences; words after the dashes, ``--- wide``, are classes of that slide, which
``assets/slides.css`` styles). A line ``+++`` in a slide splits it into two
columns. Besides markdown and ``$...$`` math, a slide may hold

* ``![alt](figure:NAME)``: the figure ``NAME.png`` that a notebook drew when
  the book was built (the build fails if no notebook drew it);
* ``{{ eq LABEL }}``: the display equation of ``derivations/`` whose tag is
  ``LABEL`` (``01.R4``), copied from the derivation as it is now;
* ``{{ output SOURCE "TEXT" [N] ["TEXT2" [N2] ...] [FORMAT] }}``: ``N`` lines
  (default 1) of what ``SOURCE`` printed when the book was built, from the
  first line that contains ``TEXT`` (then ``N2`` lines from the first that
  contains ``TEXT2``, and so on: a table's header and some of its rows).
  ``SOURCE`` is a notebook (``notebooks/NN_name.py``, as the build executed
  it) or a derivation (``derivations/NN-name.md``, its executed step blocks,
  run here in their sessions). With a format ``.Ng`` (``.3g``), every number
  printed with more than N significant digits is rounded to N (a float's
  17-digit ``repr`` becomes ``0.714``); the others stay as printed;
* ``{{ value SOURCE "TEXT" [FORMAT] }}``: the number (or word) printed right
  after ``TEXT``, in a format spec (``.2g``) if given;
* ``{{ exercises N }}``: part N's exercises with their labels, from
  :mod:`refattn.exercises`, and links to the problem set;
* ``{{ check }}``: the command that checks an answer in the student handout
  (``refattn exercises export --student``), as its README gives it;
* ``{{ size }}``: the size the notebooks that the deck cites ran at, in
  words (the book runs them at the tests' small size unless built with
  ``REFATTN_BOOK_SMALL=slides``, which runs those notebooks at full size, or
  ``REFATTN_BOOK_SMALL=0``, every notebook: :func:`small_notebooks`), so that
  a reader knows what a measured number on a slide stands for. A figure's
  caption and a printed block say "(small size)" where their notebook ran
  small.

A slide is 1280 x 720 pixels, and no text on it is smaller than 20 pixels
(``assets/slides.css``; ``tests/test_slide_fonts.py`` measures every slide in
Chromium): a table or a printed block that does not fit at that size is split
over two slides or cut, never shrunk.

The title slide of every deck, and every problem set, carries the credit line of
:func:`refattn.exercises.credit.credit` (the project, the licence, the papers).

So no number on a slide is typed by hand: each is printed by the code of the
repository as the book is built. A directive that does not resolve stops the
build. The page is rendered with ``overrides/slides.html`` (no navigation,
``assets/slides.css`` and ``assets/slides.js``): one slide at a time, paged
with the arrow keys, and one slide per page when printed.

**Problem sets.** :func:`problem_set` writes the page of part N,
``problems/part-N.md``: its exercises (part, difficulty and minutes from
:mod:`refattn.exercises`), each statement of ``exercises/`` as it is
(statements only: the model solutions live in ``instructor/solutions/`` and never reach
the book).

**PDFs.** After the site is written, :func:`print_pdfs` prints each problem
set and each deck with headless Chromium (``--print-to-pdf``) next to its
page. Without a Chromium executable (``REFATTN_CHROMIUM`` or ``chromium`` on
``PATH``) the build skips the PDFs and says so, unless
``REFATTN_EXTRAS_REQUIRED=1``, where that is an error.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import html
import io
import os
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The decks' sources, one per part of the learning path.
DECKS = {1: "slides/part-1.md", 2: "slides/part-2.md", 3: "slides/part-3.md"}
#: How long one PDF may take to print (seconds).
PRINT_TIMEOUT_S = 180


def _error(message: str) -> Exception:
    """The error that stops the build (mkdocs's ``PluginError``; a ``ValueError`` without mkdocs)."""
    try:
        from mkdocs.exceptions import PluginError  # noqa: PLC0415
    except ImportError:  # the tests of tests/test_slides.py run without the docs extra too
        return ValueError(message)
    return PluginError(message)


def required() -> bool:
    """``REFATTN_EXTRAS_REQUIRED=1`` (CI): a missing PDF is an error, not a skip."""
    return os.environ.get("REFATTN_EXTRAS_REQUIRED") == "1"


# --------------------------------------------------------------------------
# What the repository printed: notebooks (from the build's run), derivations
# --------------------------------------------------------------------------

_EXEC_BLOCK = re.compile(r'^```python exec="on"([^\n]*)\n(.*?)^```[ \t]*$', re.M | re.S)


def derivation_outputs(path: Path) -> list[str]:
    """What each executed step block of the derivation ``path`` prints, in order: the blocks
    of one ``session`` run in one namespace, as markdown-exec runs them for the page."""
    import numpy as np  # noqa: PLC0415

    namespaces: dict[str, dict] = {}
    outputs = []
    with np.printoptions():  # the blocks set print options; leave the build's as they were
        for m in _EXEC_BLOCK.finditer(path.read_text(encoding="utf-8")):
            session = re.search(r'session="([\w-]+)"', m.group(1))
            namespace = namespaces.setdefault(session.group(1) if session else f"#{m.start()}",
                                              {"__name__": "__main__"})
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                exec(compile(m.group(2), str(path), "exec"), namespace)  # noqa: S102
            outputs.append(buf.getvalue())
    return outputs


def size_words(small: bool) -> str:
    """The size the book's notebooks ran at, in words (``REFATTN_BOOK_SMALL=0`` builds at full size)."""
    return ("at the small size the tests use (`REFATTN_SMALL=1`; a build with `REFATTN_BOOK_SMALL=0` "
            "runs them at full size)" if small else "at full size (`REFATTN_SMALL=0`)")


#: The values of ``REFATTN_BOOK_SMALL``: which notebooks the book runs at the tests' small size.
BOOK_SIZES = {"1": "every notebook small (the default)", "0": "every notebook at full size",
              "slides": "the notebooks the slide decks cite at full size, the others small"}


def small_notebooks(setting: str, stems: list[str]) -> set[str]:
    """The notebooks (stems, of ``stems``) that the build runs with ``REFATTN_SMALL=1``, for the
    value ``setting`` of ``REFATTN_BOOK_SMALL`` (see ``BOOK_SIZES``); another value is an error
    naming the variable."""
    if setting not in BOOK_SIZES:
        raise _error(f"REFATTN_BOOK_SMALL: expected one of {', '.join(BOOK_SIZES)}, got {setting!r}")
    if setting == "slides":
        return set(stems) - deck_notebooks()
    return set(stems) if setting == "1" else set()


_SAVE = re.compile(r"""\bsave\(\w+,\s*["']([\w-]+)["']""")


def cited_notebooks(markdown: str, drawn: dict | None = None) -> set[str]:
    """The notebooks (stems) whose figures or printed lines ``markdown`` (a deck) cites: a
    figure is the notebook's that drew it (``drawn``: figure name -> stem; by default, the one
    whose source saves it, ``save(fig, "NAME")``)."""
    if drawn is None:
        drawn = {name: p.stem for p in (ROOT / "notebooks").glob("[0-9]*.py")
                 for name in _SAVE.findall(p.read_text(encoding="utf-8"))}
    stems = {drawn[m.group(2)] for m in _FIGURE.finditer(markdown) if m.group(2) in drawn}
    return stems | set(re.findall(r"\{\{\s*(?:output|value)\s+notebooks/([0-9][\w-]*)\.py\b", markdown))


def deck_notebooks() -> set[str]:
    """The notebooks (stems) that the slide decks cite."""
    return set().union(*(cited_notebooks((ROOT / "docs" / uri).read_text(encoding="utf-8"))
                         for uri in DECKS.values()))


class Printed:
    """The printed lines of notebooks (``runs``: the build's executed cells, by stem) and of
    derivations (their step blocks, run on first use). ``small``: the notebooks (stems) that
    ran with ``REFATTN_SMALL=1``."""

    def __init__(self, runs: dict, small: set[str]):
        self.runs = runs
        self.small = set(small)
        self.cache: dict[str, list[str]] = {}

    def is_small(self, source: str) -> bool:
        """True when ``source`` is a notebook (path or stem) that ran at the small size."""
        m = re.fullmatch(r"(?:notebooks/)?([0-9][\w-]*?)(?:\.py)?", source)
        return bool(m) and m.group(1) in self.small

    def lines(self, source: str) -> list[str]:
        if source not in self.cache:
            nb = re.fullmatch(r"notebooks/([0-9][\w-]*)\.py", source)
            if nb and nb.group(1) in self.runs:
                text = "".join(c.get("output", "") for c in self.runs[nb.group(1)]["cells"])
            elif re.fullmatch(r"derivations/[0-9][\w-]*\.md", source) and (ROOT / source).is_file():
                text = "".join(derivation_outputs(ROOT / source))
            else:
                raise _error(f"{source!r} is not a notebook the book executed (notebooks/NN_name.py) "
                             "or a derivation (derivations/NN-name.md)")
            self.cache[source] = text.splitlines()
        return self.cache[source]

    def find(self, source: str, text: str, count: int = 1) -> list[str]:
        """``count`` lines of what ``source`` printed, from the first that contains ``text``."""
        lines = self.lines(source)
        start = next((i for i, line in enumerate(lines) if text in line), None)
        if start is None:
            raise _error(f"no line that {source} printed contains {text!r}")
        if start + count > len(lines):
            raise _error(f"{source} printed {len(lines) - start} lines from the one that contains {text!r}, "
                         f"not {count}")
        return lines[start:start + count]


# --------------------------------------------------------------------------
# Directives
# --------------------------------------------------------------------------

_DISPLAY = re.compile(r"^\$\$(.+?)\$\$[ \t]*$", re.S | re.M)  # a display on lines of its own
_NUMBER = re.compile(r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|True|False)")


def equation(label: str) -> str:
    """The display equation of ``derivations/`` tagged ``\\tag{label}`` (one line ``$$...$$``).
    A label found in several derivations is taken from the one its number names (``01.R5``:
    derivation 01)."""
    found = []
    for path in sorted((ROOT / "derivations").glob("[0-9]*.md")):
        for m in _DISPLAY.finditer(path.read_text(encoding="utf-8")):
            if f"\\tag{{{label}}}" in m.group(1):
                found.append((path.name, " ".join(m.group(1).split())))
    own = [f for f in found if f[0].startswith(label.split(".")[0] + "-")]
    if len(own) == 1 or (not own and len(found) == 1):
        return f"$${(own or found)[0][1]}$$"
    where = ", ".join(f[0] for f in found) or "no derivation"
    raise _error(f"{{{{ eq {label} }}}}: the tag ({label}) is in {where}; expected exactly one display")


def number(token: str, spec: str | None) -> str:
    """``token`` (a printed number) in the format ``spec``; powers of ten written as math."""
    if spec is None or token in ("True", "False"):
        text = token
    else:
        text = format(float(token), spec)
    m = re.fullmatch(r"([-+]?[\d.]+)e([-+]?)0*(\d+)", text)
    if m:
        sign = "-" if m.group(2) == "-" else ""
        mantissa = "" if m.group(1) == "1" else f"{m.group(1)}\\times "
        return f"${mantissa}10^{{{sign}{m.group(3)}}}$"
    return text


def exercises_table(part: int, uri: str, pdf: bool) -> str:
    """Part ``part``'s exercises as a markdown table, with their labels and links, for page ``uri``."""
    from refattn.exercises import EXERCISES, PARTS  # noqa: PLC0415

    if part not in PARTS:
        raise _error(f"{{{{ exercises {part} }}}}: the parts are {sorted(PARTS)}")
    up = "../" * uri.count("/")
    rows = [ex for ex in EXERCISES if ex.part == part]
    out = ["| no | exercise | difficulty | minutes |", "|---:|---|:---:|---:|"]
    out += [f"| {ex.number} | [{_escape(ex.title)}]({up}exercises/{ex.stem}.md) | {ex.difficulty} of 3 | "
            f"{ex.minutes} |" for ex in rows]
    total = sum(ex.minutes for ex in rows)
    pdf_link = f" ([PDF]({up}problems/part-{part}.pdf))" if pdf else ""
    out += ["", f"About {total} minutes in all. The problem set to print: "
            f"[part {part}]({up}problems/part-{part}.md){pdf_link}."]
    return "\n".join(out)


def _escape(text: str) -> str:
    """``text`` as literal markdown (no emphasis, no links)."""
    return re.sub(r"([\\`*_\[\]<>|])", r"\\\1", text)


_DIRECTIVE = re.compile(r"\{\{\s*(eq|output|value|exercises|size|check)\b\s*(.*?)\s*\}\}")
_FIGURE = re.compile(r"!\[([^\]]*)\]\(figure:([\w-]+)\)")
#: A number as Python and NumPy print it, not part of a word or a label (``05.P3``, ``b_0``).
_LONG_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.])")


def round_numbers(line: str, spec: str) -> str:
    """``line`` with every number printed with more significant digits than the format ``spec``
    (``.3g``: three) keeps rewritten in it; integers and shorter numbers stay as printed."""
    keep = int(re.fullmatch(r"\.(\d+)g", spec).group(1))

    def one(m):
        token = m.group(0)
        mantissa = re.split(r"[eE]", token)[0]
        if not re.search(r"[.eE]", token) or len(mantissa.replace(".", "").lstrip("+-0")) <= keep:
            return token
        return format(float(token), spec)

    return _LONG_NUMBER.sub(one, line)


def handout_check() -> str:
    """The handout's command that checks an answer (``NAME FILE.py`` for the exercise and the file)."""
    from refattn.exercises.export import HANDOUT_CHECK  # noqa: PLC0415

    return f"{HANDOUT_CHECK} NAME FILE.py"


def credit_line(*kinds: str) -> str:
    """The credit line of what the book hands out (:func:`refattn.exercises.credit.credit`), as HTML."""
    from refattn.exercises.credit import credit  # noqa: PLC0415

    return f'<p class="credit">{html.escape(credit(*kinds))}</p>'


def deck_size(cited: set[str], small: set[str]) -> str:
    """The size the notebooks ``cited`` by a deck ran at, in words (``small``: those run small)."""
    ran_small = sorted(cited & small)
    if not ran_small:
        return size_words(False)
    if len(ran_small) == len(cited):
        return ("at the small size the tests use (`REFATTN_SMALL=1`; a build with `REFATTN_BOOK_SMALL=slides` "
                "runs them at full size)")
    names = ", ".join(s[:2] for s in ran_small)
    return f"at full size, except notebook{'s' if len(ran_small) > 1 else ''} {names}: at the small size the tests use"


def resolve(markdown: str, uri: str, figures: dict, printed: Printed, pdf: bool) -> str:
    """``markdown`` (of page ``uri``) with every directive replaced: figures, equations,
    printed output and values, exercise tables."""
    up = "../" * uri.count("/")

    def figure(m):
        alt, name = m.groups()
        if name not in figures:
            raise _error(f"{uri}: figure:{name}: no notebook drew {name}.png")
        stem = figures[name][0]
        return (f'<figure class="slide-figure" markdown>\n\n![{alt}]({up}notebooks/{stem}/{name}.png)\n\n'
                f'<figcaption>drawn by <a href="{up}notebooks/{stem}.html">notebook {stem[:2]}</a>'
                f"{' (small size)' if printed.is_small(stem) else ''}</figcaption>\n</figure>")

    def output(args):
        """The lines of ``{{ output SOURCE "TEXT" [N] ["TEXT2" [N2] ...] [FORMAT] }}``."""
        source, rest = args[0], list(args[1:])
        spec = rest.pop() if len(rest) > 1 and re.fullmatch(r"\.\d+g", rest[-1]) else None
        lines = []
        while rest:
            text = rest.pop(0)
            count = int(rest.pop(0)) if rest and rest[0].isdigit() else 1
            lines += printed.find(source, text, count)
        return [round_numbers(line, spec) for line in lines] if spec else lines

    def directive(m):
        kind, args = m.group(1), shlex.split(m.group(2))
        try:
            if kind == "size" and not args:
                drawn = {name: stem for name, (stem, *_) in figures.items()}
                return deck_size(cited_notebooks(markdown, drawn), printed.small)
            if kind == "check" and not args:
                return f"`{handout_check()}`"
            if kind == "eq" and len(args) == 1:
                return f"\n\n{equation(args[0])}\n\n"
            if kind == "exercises" and len(args) == 1:
                return "\n\n" + exercises_table(int(args[0]), uri, pdf) + "\n\n"
            if kind == "output" and len(args) >= 2 and not args[1].isdigit():
                source = args[0]
                lines = output(args)
                name = ("notebook " + source[10:12] if source.startswith("notebooks/")
                        else "derivation " + source[12:14])
                page = f"{up}{source.rsplit('.', 1)[0]}.html"
                code = html.escape("\n".join(lines))
                return (f'\n\n<div class="printed"><pre><code>{code}</code></pre>'
                        f'<p class="printed-by">printed by <a href="{page}">{name}</a>'
                        f'{" (small size)" if printed.is_small(source) else ""}</p>'
                        "</div>\n\n")
            if kind == "value" and len(args) in (2, 3):
                source, text = args[0], args[1]
                line = printed.find(source, text)[0]
                token = _NUMBER.match(line[line.index(text) + len(text):])
                if not token:
                    raise _error(f"{uri}: {m.group(0)}: no number after {text!r} in {line!r}")
                return number(token.group(1), args[2] if len(args) == 3 else None)
        except ValueError as e:
            raise _error(f"{uri}: {m.group(0)}: {e}") from e
        raise _error(f"{uri}: {m.group(0)}: expected {{{{ eq LABEL }}}}, "
                     f"{{{{ output SOURCE \"TEXT\" [N] [\"TEXT2\" [N2] ...] [FORMAT] }}}}, "
                     f"{{{{ value SOURCE \"TEXT\" [FORMAT] }}}}, {{{{ exercises PART }}}}, {{{{ size }}}} "
                     f"or {{{{ check }}}}")

    return _DIRECTIVE.sub(directive, _FIGURE.sub(figure, markdown))


# --------------------------------------------------------------------------
# A deck: slides in <section>s
# --------------------------------------------------------------------------

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_SLIDE_BREAK = re.compile(r"^---(?:[ \t]+([\w -]+?))?[ \t]*$")


def split_slides(markdown: str) -> list[tuple[list[str], str]]:
    """The slides of a deck's markdown: ``(classes, text)`` for each, split at the lines
    ``---`` outside code fences (the first slide is the text before the first such line)."""
    slides, classes, chunk, fence = [], ["title"], [], None
    for line in markdown.splitlines():
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            fence = None
        elif fence is None and (b := _SLIDE_BREAK.match(line)):
            slides.append((classes, "\n".join(chunk)))
            classes, chunk = (b.group(1) or "").split(), []
            continue
        chunk.append(line)
    slides.append((classes, "\n".join(chunk)))
    return [(c, t) for c, t in slides if t.strip()]


def deck_markdown(markdown: str) -> str:
    """A deck's markdown (directives resolved) with each slide in a ``<section class="slide">``,
    its heading first and, where the slide has a line ``+++``, the rest in two columns."""
    out = []
    slides = split_slides(markdown)
    title = re.search(r"^# (.+)$", slides[0][1] if slides else "", re.M)
    deck = html.escape(re.sub(r"[`*_]", "", title.group(1)) if title else "", quote=True)
    for n, (classes, text) in enumerate(slides, 1):
        lines = text.strip("\n").splitlines()
        head = []
        if lines and re.match(r"#{1,3} ", lines[0]):
            head, lines = [lines[0]], lines[1:]
        body = "\n".join(lines) + (f"\n\n{credit_line('text')}" if n == 1 else "")
        if re.search(r"^\+\+\+[ \t]*$", body, re.M):
            left, right = re.split(r"^\+\+\+[ \t]*$", body, maxsplit=1, flags=re.M)
            body = (f'<div class="columns" markdown>\n<div class="column" markdown>\n\n{left.strip()}\n\n</div>\n'
                    f'<div class="column" markdown>\n\n{right.strip()}\n\n</div>\n</div>')
            classes = [*classes, "two-columns"]
        cls = " ".join(["slide", *classes])
        out.append(f'<section class="{cls}" id="slide-{n}" data-number="{n} / {len(slides)}" data-deck="{deck}" '
                   f'markdown>\n\n' + "\n".join(head)
                   + f'\n\n<div class="slide-body" markdown>\n\n{body}\n\n</div>\n\n</section>\n')
    return "\n".join(out)


# --------------------------------------------------------------------------
# Problem sets
# --------------------------------------------------------------------------


def problem_set(part: int, pdf: bool) -> str:
    """The markdown of ``problems/part-{part}.md``: part ``part``'s exercises, each statement
    as ``exercises/`` has it (its title and labels from :mod:`refattn.exercises`)."""
    from refattn.exercises import EXERCISES, PARTS  # noqa: PLC0415

    rows = [ex for ex in EXERCISES if ex.part == part]
    total = sum(ex.minutes for ex in rows)
    pdf_line = (f"To print: [the PDF](part-{part}.pdf), each exercise on a page of its own, or this page "
                "from the browser.\n{: .screen-only }\n\n") if pdf else ""
    out = [f"# Problem set, part {part}: {PARTS[part]}\n",
           f'<div class="problem-set-intro" markdown>\n\n'
           f"{len(rows)} exercises on part {part} of the [learning path](../index.md#the-learning-path), "
           f"about {total} minutes in all. Each asks for a derivation, and for its answer in one file of your "
           f"own (NumPy functions, or a number): `{handout_check()}` checks it in the student handout "
           f"your course gives you (`refattn exercises check NAME FILE.py` in a clone). The statements are those of "
           f"the [exercises](../exercises/README.md); the model solutions are not in this book.\n\n"
           f"{pdf_line}{credit_line('text')}\n\n</div>\n",
           "| no | exercise | difficulty | minutes |", "|---:|---|:---:|---:|"]
    out += [f"| {ex.number} | [{_escape(ex.title)}](#exercise-{ex.number}) | {ex.difficulty} of 3 | {ex.minutes} |"
            for ex in rows]
    for ex in rows:
        text = (ROOT / ex.statement).read_text(encoding="utf-8")
        body = text.split("\n", 1)[1] if text.startswith("# ") else text
        body = body.replace(ex.label_line, "", 1).strip()
        out += ["", '<section class="problem" markdown>\n',
                f"## Exercise {ex.number}: {_escape(ex.title)} {{ #exercise-{ex.number} }}\n",
                f'<p class="problem-labels">Difficulty {ex.difficulty} of 3 · about {ex.minutes} minutes · '
                f"<code>{html.escape(ex.name)}</code></p>\n", body, "\n</section>"]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------
# PDFs, by headless Chromium
# --------------------------------------------------------------------------

_PDF_LINK = re.compile(r"\s*\(\[PDF\]\([^()\s]*\.pdf\)\)")


def drop_pdf_links(markdown: str) -> str:
    """``markdown`` without its `` ([PDF](....pdf))`` links, for a build that prints no PDF."""
    return _PDF_LINK.sub("", markdown)



def print_pdf(chromium: str, page: Path, pdf: Path) -> None:
    """Print the HTML file ``page`` to ``pdf`` with headless Chromium, after its scripts ran
    (MathJax typesets before the page counts as loaded: ``--virtual-time-budget``)."""
    with tempfile.TemporaryDirectory(prefix="refattn-chromium-") as profile:
        tmp = pdf.with_suffix(".pdf.part")
        tmp.unlink(missing_ok=True)
        r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                            f"--user-data-dir={profile}", "--no-pdf-header-footer", "--virtual-time-budget=30000",
                            f"--print-to-pdf={tmp}", page.as_uri() + "?pdf"],  # ?pdf: assets/pdf.js unlinks
                           capture_output=True, text=True, timeout=PRINT_TIMEOUT_S, check=False)
        if r.returncode != 0 or not tmp.is_file() or tmp.read_bytes()[:5] != b"%PDF-":
            raise _error(f"{chromium} could not print {page.name} to PDF (exit {r.returncode}):\n"
                         + (r.stderr or r.stdout)[-2000:])
        tmp.replace(pdf)


def print_pdfs(chromium: str, site: Path, pages: list[str]) -> None:
    """Print each page (``slides/part-1.html``, ...) of the built ``site`` to the PDF beside it."""
    jobs = [(site / p, site / (p[:-5] + ".pdf")) for p in pages]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        list(pool.map(lambda job: print_pdf(chromium, *job), jobs))
