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
