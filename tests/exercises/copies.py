"""Answers for the tests of the similarity report: correct answers written independently (as five
students might, each their own way), and :func:`rewrite`, which makes a light rewrite of any answer
(names changed, calls respelt, commutative operands swapped, independent statements reordered,
laid out anew, comments dropped), as a student hiding a copy would."""

from __future__ import annotations

import ast
import random

#: Correct answers, written independently of one another and of the model solutions.
INDEPENDENT = {
    "softmax-vjp": [
        """
import numpy as np

def softmax_vjp(s, u):
    m = s.max(axis=-1, keepdims=True)
    lse = m + np.log(np.exp(s - m).sum(axis=-1, keepdims=True))  # log-sum-exp
    p = np.exp(s - lse)
    dot = np.einsum("...i,...i->...", u, p)[..., None]
    return p * u - p * dot
""", """
import numpy as np

def softmax_vjp(s, u):
    z = s - np.amax(s, -1, keepdims=True)
    w = np.exp(z)
    w = w / w.sum(-1, keepdims=True)
    mean = np.average(u, axis=-1, weights=w)[..., None]  # the cotangent's mean under the weights
    return w * (u - mean)
""", """
import numpy as np

def softmax_vjp(s, u):
    rows = s.reshape(-1, s.shape[-1])
    ups = u.reshape(-1, u.shape[-1])
    out = np.empty_like(rows)
    for r in range(rows.shape[0]):
        ex = np.exp(rows[r] - rows[r].max())
        pr = ex / ex.sum()
        out[r] = pr * (ups[r] - pr @ ups[r])
    return out.reshape(s.shape)
""", """
import numpy as np

def softmax_vjp(s, u):
    shifted = s - s.max(axis=-1, keepdims=True)
    probs = np.exp(shifted)
    probs /= probs.sum(axis=-1, keepdims=True)
    inner = (u * probs).sum(axis=-1, keepdims=True)
    return probs * (u - inner)
""", """
import numpy as np


def _softmax(x):
    t = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return t / np.sum(t, axis=-1, keepdims=True)


def softmax_vjp(s, u):
    y = _softmax(s)
    weighted = u * y
    return weighted - y * np.sum(weighted, axis=-1, keepdims=True)
"""],
    "reweighted-vjp": [
        """
import numpy as np

def reweighted_vjp(p, rho, drho, dell, u):
    phi = p * rho
    inner = np.sum(phi * u, axis=-1, keepdims=True)
    return p * (u * drho + dell * (u * rho - inner))
""", """
import numpy as np

def reweighted_vjp(p, rho, drho, dell, u):
    n = p.shape[-1]
    phi = rho * p
    diag = (drho * p + phi * dell)[..., :, None] * np.eye(n)
    J = diag - phi[..., :, None] * (p * dell)[..., None, :]  # J[j, k] = d phi_j / d s_k
    return np.einsum("...j,...jk->...k", u, J)
""", """
import numpy as np

def reweighted_vjp(p, rho, drho, dell, u):
    shape = p.shape
    P, R, DR, DL, U = (np.reshape(a, (-1, shape[-1])) for a in (p, rho, drho, dell, u))
    out = np.zeros_like(P)
    for i in range(len(P)):
        c = float(np.dot(U[i], R[i] * P[i]))
        out[i] = U[i] * DR[i] * P[i] + P[i] * DL[i] * (U[i] * R[i] - c)
    return out.reshape(shape)
""", """
import numpy as np

def reweighted_vjp(p, rho, drho, dell, u):
    weights = rho * p
    total = (u * weights).sum(-1)[..., np.newaxis]
    first = u * drho * p
    second = p * dell * (u * rho)
    third = p * dell * total
    return first + second - third
""", """
import numpy as np

def reweighted_vjp(p, rho, drho, dell, u):
    g = u * p
    c = np.einsum("...i,...i->...", g, rho)[..., None]
    return g * drho + dell * (g * rho - p * c)
"""],
    "prop1-new-activation": [
        """
import numpy as np

def delta_II(s, o):
    sp = np.logaddexp(0.0, s)
    total = sp.sum(axis=-1, keepdims=True)
    w = sp / total
    sig = np.exp(s - sp)  # the logistic e^s / (1 + e^s), accurate far below 0 where 1 + tanh(s/2) cancels
    obar = (w * o).sum(axis=-1, keepdims=True)
    return sig / total * (o - obar)  # w ell' = sigmoid / sum softplus: no 0/0
""", """
import numpy as np

def softplus(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))

def sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))

def delta_II(s, o):
    f = softplus(s)
    fsum = np.sum(f, -1, keepdims=True)
    J_part = sigmoid(s) / fsum
    mean_o = np.sum(f * o, -1, keepdims=True) / fsum
    return J_part * (o - mean_o)
""", """
import math
import numpy as np

def delta_II(s, o):
    flat_s = s.reshape(-1, s.shape[-1])
    flat_o = o.reshape(-1, o.shape[-1])
    result = np.zeros_like(flat_s)
    for r, (row, orow) in enumerate(zip(flat_s, flat_o)):
        sp = np.array([max(x, 0.0) + math.log1p(math.exp(-abs(x))) for x in row])
        sg = np.array([1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x)) for x in row])
        S = sp.sum()
        result[r] = sg / S * (orow - (sp @ orow) / S)
    return result.reshape(s.shape)
""", """
import numpy as np

def delta_II(s, o):
    pos = np.clip(s, 0, None)
    soft = pos + np.log1p(np.exp(-np.abs(s)))
    lam = np.exp(s - pos) / (np.exp(-pos) + np.exp(s - pos))  # the logistic, either sign
    Z = soft.sum(axis=-1)[..., None]
    phi = soft / Z
    jac_o = phi * o
    return lam / Z * o - lam / Z * jac_o.sum(axis=-1)[..., None]
""", """
import numpy as np

def delta_II(s, o):
    a = np.logaddexp(0, s)                 # softplus
    b = np.exp(-np.logaddexp(0, -s))       # sigmoid
    denom = a.sum(-1, keepdims=True)
    weights = a / denom
    centred = o - np.einsum("...k,...k->...", weights, o)[..., None]
    return (b / denom) * centred
"""],
}

_SWAP = (ast.Add, ast.Mult)


class _Rewrite(ast.NodeTransformer):
    def __init__(self, keep, rng):
        self.keep, self.rng, self.names = set(keep), rng, {}

    def _new(self, name):
        if name in self.keep or name.startswith("__"):
            return name
        return self.names.setdefault(name, f"v{len(self.names)}_{self.rng.randrange(100)}")

    def visit_Name(self, node):
        if node.id in self.bound:
            node.id = self._new(node.id)
        elif node.id == "np":
            node.id = "numpy"
        return node

    def visit_FunctionDef(self, node):
        node.name = self._new(node.name)
        self.generic_visit(node)
        node.body = _reorder(node.body)
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, _SWAP) and self.rng.random() < 0.7:
            node.left, node.right = node.right, node.left
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "numpy" and \
                f.attr in ("sum", "max") and node.args and isinstance(node.args[0], ast.Name):
            return ast.Call(ast.Attribute(node.args[0], f.attr, ast.Load()), node.args[1:], node.keywords)
        return node

    def visit_Import(self, node):
        for a in node.names:
            if a.name == "numpy":
                a.asname = None
        return node


def _names(stmt, ctx):
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def _reorder(body):
    """``body`` with each statement moved before the one above it where neither uses what the other writes."""
    body = list(body)
    for j in range(len(body) - 1, 0, -1):
        a, b = body[j - 1], body[j]
        if isinstance(a, (ast.Assign, ast.FunctionDef)) and isinstance(b, (ast.Assign, ast.FunctionDef)):
            wa = _names(a, ast.Store) | {getattr(a, "name", None)}
            wb = _names(b, ast.Store) | {getattr(b, "name", None)}
            if not (wa & (_names(b, ast.Load) | wb) or wb & _names(a, ast.Load)):
                body[j - 1], body[j] = b, a
    return body


def rewrite(source, keep=(), seed=0) -> str:
    """A light rewrite of ``source`` that computes the same: every name it binds renamed (but those in
    ``keep``: the functions an exercise asks for, and their parameters), ``np.sum(x, ...)`` spelt
    ``x.sum(...)`` and ``np`` as ``numpy``, operands of ``+`` and ``*`` swapped, independent statements
    swapped, the layout Python's own (comments gone)."""
    tree = ast.parse(source)
    rw = _Rewrite(keep, random.Random(seed))
    rw.bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    rw.bound |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    tree = rw.visit(tree)
    tree.body = _reorder(tree.body)
    return ast.unparse(tree) + "\n"
