"""The equation index (``derivations/index.md``) and the overview
(``derivations/00-overview.md``) stay true to the repository and the papers.

* every numbered equation, proposition, definition, algorithm, table and
  figure of the papers has exactly one row (a dropped row fails), and, when
  the papers' texts sit next to this checkout, that list is what the texts
  number;
* every status is one of the allowed words, and the summary counts are the
  rows' counts;
* every ``refattn....`` name resolves (import the module, then getattr),
  every ``tests/...::test_name`` is a test function in that file (read, not
  imported), every link points to an existing file and heading;
* the overview's table has one row per registered activation.

A test here that fails names the row or the name that is wrong.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import re

import pytest

import refattn

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
DERIVATIONS = ROOT / "derivations"
INDEX = DERIVATIONS / "index.md"
OVERVIEW = DERIVATIONS / "00-overview.md"
DOCS = (INDEX, OVERVIEW)
SEEDS = ROOT.parent / "shared" / "seeds"

STATUSES = ("verified", "corrected", "refuted", "reproduced", "reproduced under stated conditions",
            "partially reproduced", "inconclusive at this scale", "not reproduced", "not checked", "not applicable")
PAPERS = ("TanhMax", "Cog", "NeuralAttn", "Expressive")
#: the sources of the normalisers beyond the four papers (derivation 25): one row for each formula
BEYOND = ("Miller", "Softpick", "StableMax", "Based")
SOURCES = PAPERS + BEYOND
SEED_FILES = {"TanhMax": "001_*.txt", "Cog": "002_*.txt", "NeuralAttn": "003_*.txt",
              "Expressive": "004_*.txt"}


def _items(kind, last):
    return {f"{kind} {k}" for k in range(1, last + 1)}


#: Every numbered item of each paper, as the index labels it (Cog numbers
#: nothing: its three displayed formulas and two code functions).
EXPECTED = {
    "TanhMax": _items("Eq.", 11) | _items("Proposition", 2) | _items("Definition", 1)
    | _items("Table", 4) | _items("Fig.", 5),
    "Cog": _items("display", 3) | {"code cog_attn", "code tr_forward"},
    "NeuralAttn": _items("Eq.", 9) | _items("Algorithm", 1) | _items("Table", 8) | _items("Fig.", 11),
    "Expressive": _items("Eq.", 9) | _items("Fig.", 7),
    **{source: {"formula"} for source in BEYOND},
}

ITEM_RE = re.compile(r"^(" + "|".join(SOURCES) + r") "
                     r"((?:Eq\.|Proposition|Definition|Lemma|Theorem|Corollary|Algorithm|Table|Fig\.|display) \d+"
                     r"|code \w+|formula)$")
STATUS_RE = re.compile(r"^\*\*(" + "|".join(STATUSES) + r")\*\*")
DOTTED_RE = re.compile(r"^refattn(\.[A-Za-z_]\w*)+$")
TEST_RE = re.compile(r"^(tests/[\w/]+\.py)::(test_\w+)$")
PATH_RE = re.compile(r"^(?:notebooks|tests|refattn|derivations|benchmarks)/[\w/.-]+\.\w+$")
LINK_RE = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
CODE_RE = re.compile(r"`([^`]+)`")
NONE = "—"


# --------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------


def _without_fences(text):
    """The text with fenced code blocks blanked (their lines kept, emptied)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return out


def _table_rows(path):
    """Every table row of ``path`` as a list of stripped cells (separator rows left out)."""
    rows = []
    for line in _without_fences(path.read_text(encoding="utf-8")):
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue
        rows.append(cells)
    return rows


def _index_rows():
    """(paper, item, cells) for every row of the index whose first cell is an item label."""
    out = []
    for cells in _table_rows(INDEX):
        m = ITEM_RE.match(cells[0])
        if m:
            out.append((m.group(1), m.group(2), cells))
    return out


def _code_spans(cell):
    return CODE_RE.findall(cell)


def _listed(cell, pattern, what):
    """The backticked entries of a function or test cell, each required to match ``pattern``."""
    if cell == NONE:
        return []
    spans = _code_spans(cell)
    assert spans, f"{what} cell {cell!r}: expected backticked names or {NONE!r}"
    leftover = CODE_RE.sub("", cell).replace(",", "").strip()
    assert not leftover, f"{what} cell {cell!r}: text outside the backticked names: {leftover!r}"
    for s in spans:
        assert pattern.match(s), f"{what} cell: {s!r} is not of the form {pattern.pattern}"
    return spans


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


def _anchors(path):
    anchors, seen = set(), {}
    for line in _without_fences(path.read_text(encoding="utf-8")):
        m = re.match(r"#{1,6}\s+(.*)", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        anchors.add(base if n == 0 else f"{base}-{n}")
    return anchors


def _links(path):
    out = []
    for line in _without_fences(path.read_text(encoding="utf-8")):
        out.extend(LINK_RE.findall(line))
    return out


def _all_code_spans(path):
    out = []
    for line in _without_fences(path.read_text(encoding="utf-8")):
        out.extend(CODE_RE.findall(line))
    return out


def _resolve(name):
    """Import the longest module prefix of ``name``, then follow the rest with getattr."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name is not None and not module.startswith(e.name) and e.name != module:
                raise  # a dependency is missing, not this name
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


def _test_functions(path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")}


def _names_in_docs():
    """Every refattn name and test reference of both files (index cells and overview code spans)."""
    names, tests = set(), set()
    for path in DOCS:
        for span in _all_code_spans(path):
            if DOTTED_RE.match(span):
                names.add(span)
            elif span.startswith("tests/") and "::" in span:
                tests.add(span)
    for _, _, cells in _index_rows():
        names.update(_listed(cells[4], DOTTED_RE, "function"))
        tests.update(_listed(cells[5], TEST_RE, "test"))
    return sorted(names), sorted(tests)


NAMES, TESTS = _names_in_docs()
LINKS = sorted({(path.name, target) for path in DOCS for _, target in _links(path)})


# --------------------------------------------------------------------------
# the rows
# --------------------------------------------------------------------------


def test_every_index_table_row_is_an_item_with_six_cells():
    for cells in _table_rows(INDEX):
        if cells[0] in ("item", "paper") or cells[0] in SOURCES + ("all",):
            continue  # headers and the summary table
        assert ITEM_RE.match(cells[0]), f"index row {cells[0]!r}: not an item label of the form 'Paper Eq. k'"
        assert len(cells) == 6, f"index row {cells[0]!r}: {len(cells)} cells, expected 6"
        assert all(cells), f"index row {cells[0]!r}: an empty cell (write {NONE!r})"


@pytest.mark.parametrize("paper", SOURCES)
def test_every_numbered_item_has_exactly_one_row(paper):
    labels = [item for p, item, _ in _index_rows() if p == paper]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    assert not dupes, f"{paper}: more than one row for {dupes}"
    missing = sorted(EXPECTED[paper] - set(labels))
    extra = sorted(set(labels) - EXPECTED[paper])
    assert not missing, f"{paper}: no row for {missing}"
    assert not extra, f"{paper}: rows for items the paper does not number: {extra}"


def _numbered_in_text(paper, text):
    """What the paper's text numbers, read with one pattern per kind of item."""
    found = set()
    patterns = {
        "Table": r"^Table (\d+):",
        "Fig.": r"^Figure (\d+):",
        "Proposition": r"(?:^|\*\*)Proposition (\d+)\.",
        "Definition": r"(?:^|\*\*)Definition (\d+)\.",
        "Lemma": r"(?:^|\*\*)Lemma (\d+)\.",
        "Theorem": r"(?:^|\*\*)Theorem (\d+)\.",
        "Corollary": r"(?:^|\*\*)Corollary (\d+)\.",
        "Algorithm": r"^Algorithm (\d+) ",
    }
    for kind, pat in patterns.items():
        found |= {f"{kind} {k}" for k in re.findall(pat, text, flags=re.M)}
    eq = (r"\\tag\{(\d+)\}"  # TanhMax
          r"|^\((\d+)\)\s*$"  # TanhMax, a number on its own line after $$
          r"|\\quad \((\d+)\)"  # Expressive
          r"|\\displaystyle.* \((\d+)\)\s*$")  # NeuralAttn, at the end of the LaTeX line
    for groups in re.findall(eq, text, flags=re.M):
        found.add("Eq. " + next(g for g in groups if g))
    return found


@pytest.mark.parametrize("paper", PAPERS)
def test_the_enumeration_is_what_the_papers_number(paper):
    files = sorted(SEEDS.glob(SEED_FILES[paper]))
    if not files:
        pytest.skip("the papers' texts are not next to this checkout")
    text = files[0].read_text(encoding="utf-8")
    found = _numbered_in_text(paper, text)
    if paper == "Cog":
        assert found == set(), f"Cog numbers {sorted(found)}; give each a row"
        assert len(re.findall(r"\\begin\{align\}", text)) == 3  # the three displays
        assert "def cog_attn" in text and "def tr_forward" in text
    else:
        assert found == EXPECTED[paper], (f"{paper}: the text numbers {sorted(found ^ EXPECTED[paper])} "
                                          "differently from EXPECTED")


@pytest.mark.parametrize("row", _index_rows(), ids=lambda r: f"{r[0]} {r[1]}")
def test_status_is_one_of_the_allowed_words(row):
    paper, item, cells = row
    assert STATUS_RE.match(cells[2]), (f"{paper} {item}: status {cells[2][:40]!r} must start with one of "
                                       f"{', '.join('**' + s + '**' for s in STATUSES)}")


def test_verified_and_reproduced_rows_name_a_test():
    for paper, item, cells in _index_rows():
        m = STATUS_RE.match(cells[2])
        status = m.group(1) if m else None  # a bad status is reported by the test above
        if status in ("verified", "corrected", "refuted", "reproduced", "reproduced under stated conditions",
                      "partially reproduced"):
            assert cells[5] != NONE, f"{paper} {item}: status {status!r} but no test"


def test_summary_counts_are_the_rows_counts():
    counts = {p: dict.fromkeys(STATUSES, 0) for p in SOURCES}
    for paper, item, cells in _index_rows():
        m = STATUS_RE.match(cells[2])
        assert m, f"{paper} {item}: no status word, so the counts cannot be compared"
        counts[paper][m.group(1)] += 1
    counts["all"] = {s: sum(counts[p][s] for p in SOURCES) for s in STATUSES}
    header = None
    table = {}
    for cells in _table_rows(INDEX):
        if cells[0] == "paper":
            header = cells
        elif header is not None and cells[0] in counts:
            table[cells[0]] = dict(zip(header[1:], (int(c) for c in cells[1:])))
    assert header is not None, "index: no summary table with a 'paper' column"
    assert set(table) == set(counts), f"summary table rows {sorted(table)}"
    for paper, row in table.items():
        assert row["rows"] == sum(counts[paper].values()), f"summary, {paper}: rows"
        for s in STATUSES:
            assert row[s] == counts[paper][s], f"summary, {paper}, {s}: table {row[s]}, rows {counts[paper][s]}"


# --------------------------------------------------------------------------
# names, tests and links
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_refattn_name_resolves(name):
    try:
        _resolve(name)
    except (ImportError, AttributeError) as e:
        pytest.fail(f"{name}: does not resolve ({type(e).__name__}: {e})")


@pytest.mark.parametrize("ref", TESTS)
def test_test_reference_exists(ref):
    m = TEST_RE.match(ref)
    assert m, f"{ref}: not of the form tests/file.py::test_name"
    path = ROOT / m.group(1)
    assert path.is_file(), f"{ref}: no file {m.group(1)}"
    assert m.group(2) in _test_functions(path), f"{ref}: no test function {m.group(2)} in {m.group(1)}"


@pytest.mark.parametrize("doc, target", LINKS)
def test_link_target_and_heading_exist(doc, target):
    if re.match(r"^[a-z]+://", target):
        return
    path, _, anchor = target.partition("#")
    file = (DERIVATIONS / path) if path else (DERIVATIONS / doc)
    assert file.exists(), f"{doc}: link to {target}: no file {file.relative_to(ROOT)}"
    if anchor:
        assert file.suffix == ".md", f"{doc}: link to {target}: an anchor into a non-markdown file"
        assert anchor in _anchors(file), f"{doc}: link to {target}: no heading with anchor #{anchor}"


def test_derivation_cells_are_links_or_a_dash():
    for paper, item, cells in _index_rows():
        cell = cells[3]
        if cell == NONE:
            continue
        links = LINK_RE.findall(cell)
        assert links, f"{paper} {item}: derivation cell {cell!r} has no link"
        leftover = LINK_RE.sub("", cell).replace(",", "").strip()
        assert not leftover, f"{paper} {item}: derivation cell has text outside the links: {leftover!r}"
        for _, target in links:
            assert re.match(r"^\d\d-[\w-]+\.md#[\w-]+$", target), (
                f"{paper} {item}: {target!r} should name a derivation file and a heading")


def test_paths_named_in_code_spans_exist():
    for path in DOCS:
        for span in _all_code_spans(path):
            if PATH_RE.match(span):
                assert (ROOT / span).exists(), f"{path.name}: `{span}` does not exist"


def test_the_name_and_test_lists_are_not_empty():
    # guards the parametrised tests above against a parser that finds nothing
    assert len(NAMES) >= 60 and len(TESTS) >= 60 and len(LINKS) >= 40


# --------------------------------------------------------------------------
# the overview
# --------------------------------------------------------------------------


def test_overview_table_has_one_row_per_registered_activation():
    rows = [cells for cells in _table_rows(OVERVIEW)]
    start = next((i for i, c in enumerate(rows) if c[0] == "name" and "$g(s)$" in c), None)
    assert start is not None, "00-overview.md: no table with a 'name' column and $g(s)$"
    names = []
    for cells in rows[start + 1:]:
        m = re.fullmatch(r"`(\w+)`", cells[0])
        if not m:
            break
        assert len(cells) == 7, f"00-overview.md, row {cells[0]}: {len(cells)} cells, expected 7"
        names.append(m.group(1))
    assert names == list(refattn.ACTIVATIONS), (
        f"00-overview.md lists {names}; the registry is {list(refattn.ACTIVATIONS)}")


# --------------------------------------------------------------------------
# arithmetic inside NeuralAttn, for the two "verified (arithmetic)" rows
# --------------------------------------------------------------------------


def test_neuralattn_tables_2_and_5_follow_from_tables_1_3_4():
    dot = 26.03  # Table 1, perplexity
    table1 = {"2": 24.71, "16": 24.55, "none": 24.77}
    table2 = {"2": 5.07, "16": 5.69, "none": 4.84}  # percent
    for k, ppl in table1.items():
        assert round(100 * (dot - ppl) / dot, 2) == table2[k]
    assert round(table2["16"] - table2["2"], 2) == 0.62  # "decreased ... by 0.62 percentage points"
    # Table 5 is Tables 3-4's difference in points, not the relative change the Conclusion names
    cifar10, cifar100 = (83.70, 86.70), (55.63, 59.89)
    assert round(cifar10[1] - cifar10[0], 2) == 3.0 and round(cifar100[1] - cifar100[0], 2) == 4.26
    assert round(100 * (cifar10[1] - cifar10[0]) / cifar10[0], 1) == 3.6
    assert round(100 * (cifar100[1] - cifar100[0]) / cifar100[0], 1) == 7.7
    # Table 1's sizes: Neural Attention (d' = 2) adds 0.524 M parameters to 46.528 M, fewer than
    # Eq. 8's per-pair W_h alone would need at n = 1024 (n^2 pairs x 2d' x h, h >= 1)
    assert (47.052 - 46.528) * 1e6 < 1024**2 * 2 * 2
