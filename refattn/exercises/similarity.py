"""Near-copies, found by structure: an answer against the library and the model solution, and answers across a class.

A file is compared by its normalised text (:func:`normalise`): no docstrings,
comments, imports or layout; every name it binds spelt ``_``; one spelling
for equivalent calls (``np.sum(x, -1)``, ``numpy.sum(x, axis=-1)`` and
``x.sum(-1)`` are ``sum(_, axis=-1)``, ``math.exp`` and ``xp.exp`` are
``exp``, ``np.dot`` and ``np.matmul`` are ``@``); the operands of ``+ - * /``
sorted; each block's statements in one order among those computing the same.
Its runs of :data:`K` tokens are hashed (*shingles*). An answer's score
against a reference (the library's code for the exercise, or the model
solution less its starter) is the share of the reference's shingles it holds;
a pair of answers scores the share of the smaller's shingles the other holds,
the starter's and those most of a class wrote (:data:`COMMON`) left out. What
scores :data:`THRESHOLD` or more on :data:`MIN_SHINGLES` or more is listed, for
the instructor to read; ``docs/teach.md`` says what it cannot tell.
"""

from __future__ import annotations

import ast
import builtins
import copy
import hashlib
import heapq
import importlib
import inspect
import io
import textwrap
import tokenize

__all__ = ["K", "THRESHOLD", "MIN_SHINGLES", "COMMON", "MAX_BYTES", "MAX_NODES", "normalise", "shingles", "containment",
           "fingerprints", "similarity_report", "class_pairs"]

K = 8  #: tokens per hashed run of the normalised text
THRESHOLD = 0.8  #: the score at which an answer, or a pair of answers, is listed
MIN_SHINGLES = 12  #: fewer shingles (in a reference, or shared by a pair) say nothing
COMMON = (3, 0.1)  #: a shingle in more than 3 answers and a tenth of a class's is how the formula is written
MAX_BYTES = 64 * 1024  #: a larger answer file is not compared (an answer is a page or two)
MAX_NODES = 20_000  #: nor one of more syntax-tree nodes: each is compared in bounded time

_SPACES = {"np", "numpy", "math", "cmath", "xp", "anp", "jnp"}
_BUILTINS = set(dir(builtins))
_SPACE_OF = {"array_module", "array_namespace", "get_namespace"}  # xp = array_module(x); xp.exp
_SAME = {"amax": "max", "amin": "min", "absolute": "abs", "fabs": "abs", "true_divide": "divide"}
_OPS = {"add": ast.Add, "subtract": ast.Sub, "multiply": ast.Mult, "divide": ast.Div, "matmul": ast.MatMult,
        "dot": ast.MatMult, "power": ast.Pow}
_AXIS = {"sum", "max", "min", "mean", "prod", "any", "all", "argmax", "argmin", "std", "var", "cumsum"}
_METHODS = _AXIS | {"dot", "transpose", "reshape", "clip", "round", "item"}
_EFFECTS = (ast.Return, ast.Raise, ast.Break, ast.Continue, ast.Global, ast.Nonlocal, ast.Expr, ast.Yield, ast.Delete)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _real(node):
    return getattr(node, "_real", getattr(node, "id", None))


def _chain(node, ops):
    """The operands of a chain of ``ops``, signed (``a - (b - c)``: ``[(+, a), (-, b), (+, c)]``)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ops):
        flip = not isinstance(node.op, (ast.Add, ast.Mult))
        return _chain(node.left, ops) + [(s != flip, t) for s, t in _chain(node.right, ops)]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and ast.Add in ops:  # x + -y: x - y
        return [(not s, t) for s, t in _chain(node.operand, ops)]
    return [(True, node)]


class _Normalise(ast.NodeTransformer):
    def __init__(self, bound, spaces, aliases):
        self.bound, self.spaces, self.aliases = bound, spaces, aliases

    def visit_Name(self, node):
        if node.id in self.aliases:  # from numpy import sum as total: total is sum
            node.id, node._numpy = self.aliases[node.id], True
        elif node.id in self.bound or node.id not in _BUILTINS:  # a name of its own: the real one stays, for the order
            node._real, node.id = node.id, "_"
        return node

    def visit_arg(self, node):
        node.arg, node.annotation = "_", None
        return node

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node._real, node.name, node.returns = node.name, "_", None
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Constant(self, node):
        return ast.Constant(float(node.value)) if type(node.value) is int else node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        space = node.value.func if isinstance(node.value, ast.Call) else node.value  # np.exp, xp.exp: exp
        if isinstance(space, ast.Name) and _real(space) in self.spaces | _SPACE_OF:
            return ast.copy_location(ast.Name(node.attr, ast.Load(), _numpy=True), node)
        if node.attr == "T" and isinstance(node.ctx, ast.Load):
            return self._call(ast.Call(ast.Name("transpose", ast.Load(), _numpy=True), [node.value], []))
        return node

    def visit_Call(self, node):
        return self._call(self.generic_visit(node))

    def _call(self, node):
        f, args = node.func, list(node.args)
        if isinstance(f, ast.Attribute) and f.attr in _METHODS:  # x.sum(-1): sum(x, -1)
            f, args = ast.Name(f.attr, ast.Load(), _numpy=True), [f.value, *args]
        if not isinstance(f, ast.Name):
            return node
        name, kws = _SAME.get(f.id, f.id), list(node.keywords)
        if getattr(f, "_numpy", False) and name in _AXIS and len(args) == 2 and "axis" not in {k.arg for k in kws}:
            args, kws = args[:1], [*kws, ast.keyword("axis", args[1])]
        if name in _OPS and len(args) == 2 and not kws:
            return self._binop(ast.BinOp(args[0], _OPS[name](), args[1]))
        if name in ("asarray", "asanyarray") and len(args) == 1 and not kws:
            return args[0]
        args = sorted(args, key=ast.dump) if name in ("maximum", "minimum") else args
        func = ast.Name(name, ast.Load(), _real=_real(f))
        return ast.copy_location(ast.Call(func, args, sorted(kws, key=lambda k: k.arg or "")), node)

    def visit_BinOp(self, node):
        return self._binop(self.generic_visit(node))

    def _binop(self, node):
        for ops, one, inverse in (((ast.Add, ast.Sub), ast.Add, ast.Sub), ((ast.Mult, ast.Div), ast.Mult, ast.Div)):
            if isinstance(node.op, ops):
                (plus, out), *rest = sorted(_chain(node, ops), key=lambda t: (not t[0], ast.dump(t[1])))
                if not plus:  # every term negative (-a - b), or every factor a divisor (1 / a / b)
                    out = ast.UnaryOp(ast.USub(), out) if one is ast.Add else \
                        ast.BinOp(ast.Constant(1.0), ast.Div(), out)
                for plus, term in rest:
                    out = ast.BinOp(out, one() if plus else inverse(), term)
                return ast.copy_location(out, node)
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        swap = {ast.Gt: ast.Lt, ast.GtE: ast.LtE}.get(type(node.ops[0])) if len(node.ops) == 1 else None
        if swap:  # b > a: a < b
            node.left, node.comparators, node.ops = node.comparators[0], [node.left], [swap()]
        return node

    def visit_AugAssign(self, node):  # x += y: x = x + y
        self.generic_visit(node)
        load = copy.deepcopy(node.target)
        load.ctx = ast.Load()
        return ast.copy_location(ast.Assign([node.target], self._binop(ast.BinOp(load, node.op, node.value))), node)

    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            if isinstance(getattr(node, field, None), list):
                setattr(node, field, _order(getattr(node, field)) or ([ast.Pass()] if field == "body" else []))
        return node


def _split(stmt):
    """``a, b = x, y`` as ``a = x`` and ``b = y``, where no value reads a target."""
    t, v = (stmt.targets[0], stmt.value) if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else (0, 0)
    if not (isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple) and len(t.elts) == len(v.elts)
            and all(isinstance(e, ast.Name) for e in t.elts)) or \
            {_real(e) for e in t.elts} & {_real(n) for n in ast.walk(v)}:
        return [stmt]
    return [ast.copy_location(ast.Assign([a], b), stmt) for a, b in zip(t.elts, v.elts)]


def _uses(stmt):
    """``(reads, writes, has effects)`` of a statement (a ``def`` reads its decorators and defaults only)."""
    if isinstance(stmt, _DEFS):
        heads = [*stmt.decorator_list, *getattr(stmt, "bases", []), *getattr(getattr(stmt, "args", 0), "defaults", [])]
    nodes = [n for h in heads for n in ast.walk(h)] if isinstance(stmt, _DEFS) else list(ast.walk(stmt))
    reads = {_real(n) for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    writes = {_real(stmt)} if isinstance(stmt, _DEFS) else set()
    for n in nodes:  # x = ..., x[i] = ..., x.a = ...: writes of x
        if isinstance(n, (ast.Name, ast.Subscript, ast.Attribute)) and not isinstance(n.ctx, ast.Load):
            while isinstance(n, (ast.Subscript, ast.Attribute)):
                n = n.value
            writes.add(_real(n))
    return reads, writes, any(isinstance(n, _EFFECTS) for n in nodes)


def _order(body):
    """The statements of a block in one order: each time, the least (by its text) of those free to go next
    (a statement goes after the last that wrote what it uses, the reads of what it writes, effects)."""
    body = [s for stmt in body if not isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass)) and not (
        isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)) for s in _split(stmt)]
    after, writer, readers, last, since = [], {}, {}, set(), []  # last: the last with effects; since: after it
    for j, stmt in enumerate(body):
        reads, writes, effects = _uses(stmt)
        deps = {writer[x] for x in reads | writes if x in writer} | {i for x in writes for i in readers.get(x, ())}
        after.append(deps | last | (set(since) if effects else set()))
        for x in reads:
            readers.setdefault(x, []).append(j)
        for x in writes:
            writer[x], readers[x] = j, []
        last, since = ({j}, []) if effects else (last, since + [j])
    waiting, followers = [len(a) for a in after], [[] for _ in body]
    for j, a in enumerate(after):
        for i in a:
            followers[i].append(j)
    ready = [(ast.dump(body[j]), j) for j in range(len(body)) if not waiting[j]]
    heapq.heapify(ready)
    out = []
    while ready:
        j = heapq.heappop(ready)[1]
        out.append(body[j])
        for k in followers[j]:
            waiting[k] -= 1
            if not waiting[k]:
                heapq.heappush(ready, (ast.dump(body[k]), k))
    return out


def normalise(source) -> tuple:
    """``(text, statements)``: the normalised text of Python ``source``, and ``(first line, last line,
    normalised text)`` of each of its simple statements; ``ValueError`` for what cannot be read as Python,
    or is over :data:`MAX_NODES`."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:  # ValueError: a null byte
        raise ValueError(f"not Python that can be read ({type(exc).__name__})") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise ValueError(f"more than {MAX_NODES} syntax-tree nodes")
    spaces = _SPACES | {a.asname or a.name.split(".")[0] for n in nodes if isinstance(n, ast.Import) for a in n.names}
    aliases = {a.asname or a.name: a.name for n in nodes if isinstance(n, ast.ImportFrom)
               and (n.module or "").split(".")[0] in _SPACES for a in n.names}
    bound = {_real(n) for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    bound |= {n.name for n in nodes if isinstance(n, _DEFS)} | {n.arg for n in nodes if isinstance(n, ast.arg)}
    try:
        tree = _Normalise(bound - set(aliases), spaces, aliases).visit(tree)
        rows = sorted((n.lineno, n.end_lineno, ast.unparse(n)) for n in ast.walk(tree) if isinstance(n, ast.stmt)
                      and not hasattr(n, "body") and hasattr(n, "lineno"))
        return ast.unparse(tree), rows
    except (RecursionError, MemoryError) as exc:
        raise ValueError(f"nested too deep to compare ({type(exc).__name__})") from None


def _runs(text) -> set:
    tokens = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.string.strip()]
    return {hashlib.sha1(" ".join(tokens[i:i + K]).encode()).hexdigest()[:16] for i in range(len(tokens) - K + 1)}


def shingles(source) -> set:
    """The hashes of the runs of :data:`K` tokens of ``source``'s normalised text (:func:`normalise`)."""
    return _runs(normalise(source)[0])


def containment(answer: set, reference: set) -> float | None:
    """The share of ``reference``'s shingles found in ``answer`` (``None``: the reference is too short)."""
    return None if len(reference) < MIN_SHINGLES else len(answer & reference) / len(reference)


def _library_source(name) -> str:
    module, _, qualname = name.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return inspect.getsource(obj)


def fingerprints(exercises, sources=None) -> dict:
    """``{stem: {"library": [...], "solution": [...]}}``, the hashes of each exercise's references:
    its library functions, and (``sources(ex)``: the model solution's text and its starter's) what
    the model solution holds beyond its starter."""
    return {ex.stem: {"library": sorted(set().union(*(shingles(_library_source(n)) for n in ex.library))),
                      "solution": sorted(shingles(sources(ex)[0]) - shingles(sources(ex)[1])) if sources else []}
            for ex in exercises}


def read_answer(path) -> str:
    """The text of an answer file; ``ValueError`` for one over :data:`MAX_BYTES`."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES // 1024} KiB")
    return data.decode("utf-8", errors="replace")


def similarity_report(items, references) -> list:
    """One row per answer (``items``: ``(exercise, path)``): its scores against the references of
    :func:`fingerprints` and whether either reaches :data:`THRESHOLD` (``flagged``)."""
    rows = []
    for ex, path in items:
        row = {"exercise": ex.stem, "library_score": None, "solution_score": None, "flagged": False,
               "threshold": THRESHOLD}
        try:
            answer = shingles(read_answer(path))
        except (OSError, ValueError) as exc:  # one answer never stops the report
            rows.append({**row, "note": f"not compared: {exc}"})
            continue
        for kind in ("library", "solution"):
            score = containment(answer, set(references.get(ex.stem, {}).get(kind, [])))
            row[f"{kind}_score"] = None if score is None else round(score, 3)
            row["flagged"] |= score is not None and score >= THRESHOLD
        rows.append(row)
    return rows


def class_pairs(answers, starter="") -> list:
    """The near-copies among one exercise's ``answers`` (``{student: source}``, each readable as Python),
    highest first: ``{"students", "score", "shared", "evidence"}``; ``evidence`` pairs the statements, as
    written (``[line, text]``), that are one statement once normalised. ``starter``: where all began."""
    norm, base = {who: normalise(text) for who, text in answers.items()}, shingles(starter) if starter else set()
    runs = {who: _runs(text) - base for who, (text, _) in norm.items()}
    most = max(COMMON[0], COMMON[1] * len(runs))
    counts = {h: sum(h in r for r in runs.values()) for h in set().union(*runs.values())}
    runs = {who: {h for h in r if counts[h] <= most} for who, r in runs.items()}
    pairs, names = [], sorted(runs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = len(runs[a] & runs[b])
            score = shared / max(1, min(len(runs[a]), len(runs[b])))
            if shared >= MIN_SHINGLES and score >= THRESHOLD:
                pairs.append({"students": [a, b], "score": round(score, 3), "shared": shared,
                              "evidence": _evidence(answers[a], norm[a][1], answers[b], norm[b][1])})
    return sorted(pairs, key=lambda p: (-p["score"], p["students"]))


def _evidence(text_a, rows_a, text_b, rows_b) -> list:
    lines = text_a.splitlines(), text_b.splitlines()
    free, out = list(rows_b), []
    for row in rows_a:
        match = next((r for r in free if r[2] == row[2]), None)
        if match is not None and len(row[2]) >= 12:  # not "return _"
            free.remove(match)
            out.append([[r[0], " ".join(" ".join(text[r[0] - 1:r[1]]).split())]
                        for r, text in zip((row, match), lines)])
    return out
