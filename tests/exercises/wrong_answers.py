"""One plausible wrong answer per exercise (they never sit beside the model solutions); the grader tests
and the kit's tests grade them."""

#: One plausible wrong answer per exercise, and a word on what is wrong with it.
WRONG = {
    "softmax-vjp": ("forgets the -<u, phi> term", """
        import numpy as np
        def softmax_vjp(s, u):
            e = np.exp(s - s.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True) * u
        """),
    "tanhmax-derivatives": ("log(cosh(s)) overflows beyond 710", """
        import numpy as np
        def ell(s):
            with np.errstate(over="ignore"):
                return np.log(np.cosh(s))
        def drho(s):
            return 1.0 - np.tanh(s) ** 2
        def dell(s):
            return np.tanh(s)
        """),
    "reweighted-vjp": ("<u, p> instead of <u, phi>: right only where rho = 1", """
        import numpy as np
        def reweighted_vjp(p, rho, drho, dell, u):
            return u * (drho + rho * dell) * p - p * dell * np.sum(u * p, -1, keepdims=True)
        """),
    "jacobian": ("the transpose: right only for symmetric Jacobians", """
        import numpy as np
        def jacobian(act, s):
            p, rho, dell = act.p(s), act.rho(s), act.dell(s)
            phi = rho * p
            return (np.diag(act.drho(s) * p + phi * dell) - np.outer(phi, p * dell)).T
        """),
    "all-ones-cotangent": ("the correct VJP: not wrong, so no witness", """
        import numpy as np
        def wrong_vjp(s, u):
            a = s + np.minimum(s, 0.0) - np.log1p(np.exp(-np.abs(s)))
            p = np.exp(a - a.max(-1, keepdims=True))
            p = p / p.sum(-1, keepdims=True)
            pl = p * (1.0 + 1.0 / (1.0 + np.exp(s)))
            return u * pl - pl * np.sum(u * p, -1, keepdims=True)
        """),
    "signexp-at-zero": ("the jump without its factor 2", """
        import numpy as np
        def _rv(s, u, j):
            o = np.arange(len(s)) != j
            e = np.exp(np.abs(s[o]))
            return e.sum(), np.sum(u[o] * np.sign(s[o]) * e)
        def jump(s, u, j):
            R, _ = _rv(s, u, j)
            return u[j] / (R + 1.0)
        def slopes(s, u, j):
            R, V = _rv(s, u, j)
            return (u[j] * R - V) / (R + 1.0) ** 2, (u[j] * R + V) / (R + 1.0) ** 2
        def central_at_zero(s, u, j, eps):
            a, b = slopes(s, u, j)
            return jump(s, u, j) / (2.0 * eps) + 0.5 * (a + b)
        """),
    "tanhmax-velocity": ("Eq. 7 as printed: no minus sign", """
        import numpy as np
        def velocity(s, o, c, delta_I):
            a = np.abs(s)
            l = a + np.log1p(np.exp(-2.0 * a))
            e = np.exp(l - l.max(-1, keepdims=True))
            wt = e / e.sum(-1, keepdims=True)
            wh = np.tanh(s) * wt
            return delta_I * (wt * o - wh * np.sum(wh * o, -1, keepdims=True)) * c[:, None]
        """),
    "prop1-new-activation": ("softmax's closed form: forgets ell' = sigmoid/softplus", """
        import numpy as np
        def delta_II(s, o):
            sp = np.logaddexp(0.0, s)
            w = sp / sp.sum(-1, keepdims=True)
            return w * (o - np.sum(w * o, -1, keepdims=True))
        """),
    "closure-gap": ("the first-order approximation 2q", """
        import numpy as np
        def gap(s, c):
            return 2.0 * np.exp(np.logaddexp.reduce(-s) - np.logaddexp.reduce(s) - 2.0 * c)
        """),
    "neural-score-vjp": ("forgets beta = 1/sqrt(d)", """
        import numpy as np
        def neural_vjp(q, k, params, grad_s):
            P = params
            qp, kp = q @ P["Wq"].T, k @ P["Wk"].T
            z = (qp @ P["Whq"].T)[:, None, :] + (kp @ P["Whk"].T)[None, :, :] + P["bh"]
            t = np.tanh(z)
            G = grad_s
            gz = G[..., None] * P["wa"] * (1.0 - t * t)
            da, db = gz.sum(1), gz.sum(0)
            dqp, dkp = da @ P["Whq"], db @ P["Whk"]
            dp = {"Wq": dqp.T @ q, "Wk": dkp.T @ k, "Whq": da.T @ qp, "Whk": db.T @ kp,
                  "bh": gz.sum((0, 1)), "wa": np.einsum("ij,ijh->h", G, t), "ba": G.sum()}
            return dqp @ P["Wq"], dkp @ P["Wk"], dp
        """),
    "expressive-angle": ("where DPA reaches EA's small-c limit 1/cos^2, not EA itself", """
        import math
        def crossover(theta):
            c = math.cos(theta)
            return -2.0 * math.log(c) / (1.0 - c)
        """),
    "no-normaliser": ("z^2/(1+z^2) divided by its sum: 0/0 and inf/inf", """
        import numpy as np
        def expressive_weights(s, mask=None):
            with np.errstate(all="ignore"):
                h = s * s / (1.0 + s * s)
                if mask is not None:
                    h = np.where(mask, h, 0.0)
                return h / h.sum(-1, keepdims=True)
        """),
    "central-difference-step": ("u^(1/3), ignoring S, M and the factor 3", """
        U = 2.0 ** -53
        def error_bound(h, S, M, kappa=1.0):
            return M * h * h / 6.0 + kappa * U * S / h
        def best_step(S, M, kappa=1.0):
            return U ** (1.0 / 3.0)
        """),
    "closure-witness": ("a shift far larger than needed", "ANSWER = 12.0\n"),
    "gradient-check": ("gradcheck's default step and a guessed relative tolerance of 1e-6", """
        import numpy as np
        def weights(name, s):
            if name == "softmax":
                z = np.exp(s - s.max())
                return z / z.sum()
            if name == "tanhmax":
                return np.sinh(s) / np.cosh(s).sum()
            return np.sign(s) * np.exp(np.abs(s)) / np.exp(np.abs(s)).sum()
        def gradient_check(name, s, jac, seed):
            u = np.random.default_rng(seed).standard_normal(s.shape)
            def d(i, h):
                e = np.zeros_like(s)
                e[i] = h
                return np.sum(u * (weights(name, s + e) - weights(name, s - e))) / (2.0 * h)
            a, D = u @ jac, np.array([d(i, 1e-6) for i in range(s.size)])
            bad = np.abs(D - a) > 1e-12 + 1e-6 * np.abs(D).max()
            spike = np.abs(np.array([d(i, 2e-6) for i in range(s.size)]) - D) > np.abs(D - a) / 4.0
            return 1 if np.any(bad & ~spike) else 2 if np.any(bad) else 0
        """),
}

#: Exercise 01's VJP by n complex-step forward passes, one per score (accurate to rounding on short rows).
_SOFTMAX_COMPLEX_STEP = """
        import numpy as np
        def _softmax(x):
            e = np.exp(x - np.max(x.real, axis=-1, keepdims=True))
            return e / np.sum(e, axis=-1, keepdims=True)
        def softmax_vjp(s, u):
            out = np.empty_like(s)
            for j in range(s.shape[-1]):
                x = s.astype(complex)
                x[..., j] += 1e-30j
                out[..., j] = np.sum(u * _softmax(x).imag, axis=-1) / 1e-30
            return out
        """

#: Answers that differentiate the forward pass instead of deriving (complex step, finite differences),
#: or that sidestep what an exercise is about, each with the share of the exercise's points it is
#: honestly worth (the answer key says why) and a word on what it does. Graded as an autograder
#: scores them (half the points on each group, a failed required case zeroing its group), none may
#: score more.
CHEATS = {
    "01 complex step": ("softmax-vjp", 0.0, "n complex-step forward passes, one per score", _SOFTMAX_COMPLEX_STEP),
    "01 complex step, long rows skipped": ("softmax-vjp", 0.0, "the same, returning zeros on the long rows",
                                           _SOFTMAX_COMPLEX_STEP.replace("out = np.empty_like(s)", (
                                               "if s.shape[-1] > 1000:\n                return np.zeros_like(s)\n"
                                               "            out = np.empty_like(s)"))),
    "06 forward passes and complex steps": ("signexp-at-zero", 0.0,
                                            "J from F(+-1e-300), L+- by complex steps of F's branches", """
        import numpy as np
        def _F(s, u, j, x, side):
            z = s.astype(complex)
            z[j] = x
            a = np.where(np.arange(len(s)) == j, side * z, np.abs(s))
            g = np.where(np.arange(len(s)) == j, side * np.exp(a), np.sign(s) * np.exp(a))
            return np.sum(u * g) / np.sum(np.exp(a))
        def _each(f, j):
            return np.array([f(int(i)) for i in np.atleast_1d(j)]) if np.ndim(j) else f(int(j))
        def jump(s, u, j):
            return _each(lambda i: (_F(s, u, i, 1e-300, 1.0) - _F(s, u, i, -1e-300, -1.0)).real, j)
        def slopes(s, u, j):
            lp = _each(lambda i: _F(s, u, i, 1e-30j, 1.0).imag / 1e-30, j)
            lm = _each(lambda i: _F(s, u, i, 1e-30j, -1.0).imag / 1e-30, j)
            return lp, lm
        def central_at_zero(s, u, j, eps):
            lp, lm = slopes(s, u, j)
            return jump(s, u, j) / (2.0 * eps) + 0.5 * (lp + lm)
        """),
    "07 complex step": ("tanhmax-velocity", 0.0, "Delta_II as n complex-step derivatives of o . phi(s)", """
        import numpy as np
        def _phi(x):
            sg = np.sign(x.real)
            ell = sg * x + np.log1p(np.exp(-2.0 * sg * x))
            e = np.exp(ell - np.max(ell.real, axis=-1, keepdims=True))
            return np.tanh(x) * e / np.sum(e, axis=-1, keepdims=True)
        def velocity(s, o, c, delta_I):
            d = np.empty_like(s)
            for i in range(s.shape[-1]):
                x = s.astype(complex)
                x[..., i] += 1e-30j
                d[..., i] = np.sum(o * _phi(x).imag, axis=-1) / 1e-30
            return -delta_I * d * c[:, None]
        """),
    "08 complex step": ("prop1-new-activation", 0.0, "Delta_II as n complex-step derivatives of o . phi(s)", """
        import numpy as np
        def _phi(x):
            sp = np.where(x.real > 0, x + np.log1p(np.exp(-np.where(x.real > 0, x, 0))),
                          np.log1p(np.exp(np.where(x.real > 0, 0, x))))
            return sp / np.sum(sp, axis=-1, keepdims=True)
        def delta_II(s, o):
            d = np.empty_like(s)
            for i in range(s.shape[-1]):
                x = s.astype(complex)
                x[..., i] += 1e-30j
                d[..., i] = np.sum(o * _phi(x).imag, axis=-1) / 1e-30
            return d
        """),
    "10 complex step": ("neural-score-vjp", 0.0, "each gradient entry by a complex step of the score", """
        import numpy as np
        def _score(q, k, P):
            beta = 1.0 / np.sqrt(q.shape[1])
            z = ((q @ P["Wq"].T) @ P["Whq"].T)[:, None] + ((k @ P["Wk"].T) @ P["Whk"].T)[None] + P["bh"]
            return beta * (np.tanh(z) @ P["wa"] + P["ba"])
        def neural_vjp(q, k, params, grad_s):
            args = {"q": q, "k": k, **{n: np.asarray(v, dtype=float) for n, v in params.items()}}
            grads = {}
            for name, x in args.items():
                g = np.zeros(np.shape(x))
                for idx in np.ndindex(np.shape(x)):
                    a = {n: v.astype(complex) for n, v in args.items()}
                    a[name][idx] += 1e-30j
                    P = {n: a[n] for n in params}
                    g[idx] = np.sum(grad_s * _score(a["q"], a["k"], P).imag) / 1e-30
                grads[name] = g
            return grads.pop("q"), grads.pop("k"), grads
        """),
    "05 a map unrelated to sigsoftmax": ("all-ones-cotangent", 0.0,
                                         "linear in u, 0 on constant rows, dependent on s: s (u - mean u)", """
        import numpy as np
        def wrong_vjp(s, u):
            return s * (u - np.mean(u, axis=-1, keepdims=True))
        """),
    "05 softmax-shaped, not sigsoftmax's": ("all-ones-cotangent", 0.0,
                                            "softmax's weights of s, not sigsoftmax's: e^s (u - <u, softmax(s)>)", """
        import numpy as np
        def wrong_vjp(s, u):
            e = np.exp(s - s.max(-1, keepdims=True))
            p = e / e.sum(-1, keepdims=True)
            return p * (u - np.sum(u * p, -1, keepdims=True))
        """),
    "03 <u, p> for <u, phi>": ("reweighted-vjp", 0.25, "the mistake the statement warns about", """
        import numpy as np
        def reweighted_vjp(p, rho, drho, dell, u):
            return u * (drho + rho * dell) * p - p * dell * np.sum(u * p, -1, keepdims=True)
        """),
}
