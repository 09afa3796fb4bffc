"""Correct answers written otherwise than the model solutions, several per exercise: other evaluation
orders, log-sum-exp forms, a Jacobian built and applied, a loop over rows, another root finder. They
never sit beside the model solutions; ``test_exercises.py`` grades them over hundreds of hidden seeds,
where none may fail: a tolerance that fails one of them is narrower than rounding."""

#: Correct answers by exercise: ``(how it differs, its text)``.
RIGHT = {
    "softmax-vjp": [
        ("log-sum-exp form, the row scalar subtracted after the product", """
            import numpy as np
            def softmax_vjp(s, u):
                m = np.max(s, axis=-1, keepdims=True)
                lse = m + np.log(np.sum(np.exp(s - m), axis=-1, keepdims=True))
                phi = np.exp(s - lse)
                return phi * u - phi * np.sum(u * phi, axis=-1, keepdims=True)
            """),
        ("a loop over rows, the inner product by np.dot", """
            import numpy as np
            def softmax_vjp(s, u):
                rows, us = s.reshape(-1, s.shape[-1]), u.reshape(-1, s.shape[-1])
                out = np.empty_like(rows)
                for i, (r, v) in enumerate(zip(rows, us)):
                    e = np.exp(r - r.max())
                    phi = e / e.sum()
                    out[i] = phi * (v - np.dot(v, phi))
                return out.reshape(s.shape)
            """),
        ("unnormalised weights, one division at the end", """
            import numpy as np
            def softmax_vjp(s, u):
                e = np.exp(s - np.max(s, axis=-1, keepdims=True))
                z = np.sum(e, axis=-1, keepdims=True)
                return (e * u - e * (np.sum(e * u, axis=-1, keepdims=True) / z)) / z
            """),
    ],
    "tanhmax-derivatives": [
        ("logaddexp, sech^2 from e^{-2|s|}, tanh as a quotient", """
            import numpy as np
            def ell(s):
                return np.logaddexp(s, -s) - np.log(2.0)
            def drho(s):
                t = np.exp(-2.0 * np.abs(s))
                return 4.0 * t / (1.0 + t) ** 2
            def dell(s):
                t = np.exp(-2.0 * np.abs(s))
                return np.sign(s) * (1.0 - t) / (1.0 + t)
            """),
        ("|s| + log1p(e^{-2|s|}) - log 2, 1 - tanh^2", """
            import numpy as np
            def ell(s):
                a = np.abs(s)
                return a + np.log1p(np.exp(-2.0 * a)) - np.log(2.0)
            def drho(s):
                return 1.0 - np.tanh(s) ** 2
            def dell(s):
                return np.tanh(s)
            """),
        ("log(cosh) where it cannot overflow, the asymptotic form beyond", """
            import numpy as np
            def ell(s):
                a = np.abs(s)
                small = a < 20.0
                with np.errstate(over="ignore"):
                    near = np.log(np.cosh(np.where(small, a, 0.0)))
                return np.where(small, near, a - np.log(2.0) + np.log1p(np.exp(-2.0 * a)))
            def drho(s):
                c = np.cosh(np.minimum(np.abs(s), 700.0))
                return np.where(np.abs(s) < 700.0, 1.0 / (c * c), 0.0)
            def dell(s):
                return np.tanh(s)
            """),
    ],
    "reweighted-vjp": [
        ("Eq. 01.R4's grouping", """
            import numpy as np
            def reweighted_vjp(p, rho, drho, dell, u):
                phi = rho * p
                c = np.sum(u * phi, axis=-1, keepdims=True)
                return u * drho * p + p * dell * (u * rho - c)
            """),
        ("the Jacobian of Eq. 01.R3 built and applied, row by row", """
            import numpy as np
            def reweighted_vjp(p, rho, drho, dell, u):
                n = p.shape[-1]
                P, R, D, L, U = (x.reshape(-1, n) for x in (p, rho, drho, dell, u))
                out = np.zeros_like(P)
                for i in range(P.shape[0]):
                    phi = R[i] * P[i]
                    J = np.diag(D[i] * P[i] + phi * L[i]) - np.outer(phi, P[i] * L[i])
                    out[i] = U[i] @ J
                return out.reshape(p.shape)
            """),
        ("the row scalar by einsum", """
            import numpy as np
            def reweighted_vjp(p, rho, drho, dell, u):
                c = np.einsum("...i,...i->...", u, rho * p)[..., None]
                a = (drho + rho * dell) * p
                return a * u - (p * dell) * c
            """),
    ],
    "jacobian": [
        ("diag minus outer, another grouping", """
            import numpy as np
            def jacobian(act, s):
                p, rho, drho, dell = act.p(s), act.rho(s), act.drho(s), act.dell(s)
                return np.diag(p * (drho + rho * dell)) - np.outer(rho * p, p * dell)
            """),
        ("through dp/d ell: diag(rho') diag(p) + diag(rho) (diag(p) - p p^T) diag(ell')", """
            import numpy as np
            def jacobian(act, s):
                p, rho, drho, dell = act.p(s), act.rho(s), act.drho(s), act.dell(s)
                dp = (np.diag(p) - np.outer(p, p)) * dell[None, :]
                return np.diag(drho * p) + rho[:, None] * dp
            """),
        ("row j as the VJP of the unit cotangent e_j (Eq. 01.R5)", """
            import numpy as np
            def jacobian(act, s):
                p, rho, drho, dell = act.p(s), act.rho(s), act.drho(s), act.dell(s)
                n = s.shape[0]
                J = np.zeros((n, n))
                for j in range(n):
                    u = np.zeros(n)
                    u[j] = 1.0
                    J[j] = u * (drho + rho * dell) * p - p * dell * np.sum(u * rho * p)
                return J.T.T
            """),
    ],
    "all-ones-cotangent": [
        ("forgets ell', sigsoftmax's weights by log-sum-exp", """
            import numpy as np
            def wrong_vjp(s, u):
                ell = s - np.logaddexp(0.0, -s)
                m = ell.max(-1, keepdims=True)
                p = np.exp(ell - m - np.log(np.sum(np.exp(ell - m), -1, keepdims=True)))
                return p * u - p * np.sum(u * p, -1, keepdims=True)
            """),
        ("ell' with the sign of sigmoid's argument slipped: 1 + sigmoid(s)", """
            import numpy as np
            def wrong_vjp(s, u):
                ell = s - np.logaddexp(0.0, -s)
                e = np.exp(ell - ell.max(-1, keepdims=True))
                p = e / e.sum(-1, keepdims=True)
                return p * (1.0 + np.exp(-np.logaddexp(0.0, -s))) * (u - np.sum(u * p, -1, keepdims=True))
            """),
        ("forgets the 1 of ell' = 1 + sigmoid(-s)", """
            import numpy as np
            def wrong_vjp(s, u):
                ell = s - np.logaddexp(0.0, -s)
                e = np.exp(ell - ell.max(-1, keepdims=True))
                p = e / e.sum(-1, keepdims=True)
                return p * np.exp(-np.logaddexp(0.0, s)) * (u - np.sum(u * p, -1, keepdims=True))
            """),
        ("the true VJP twice over: a factor 2", """
            import numpy as np
            def wrong_vjp(s, u):
                ell = s - np.logaddexp(0.0, -s)
                e = np.exp(ell - ell.max(-1, keepdims=True))
                p = e / e.sum(-1, keepdims=True)
                dell = 1.0 + np.exp(-np.logaddexp(0.0, s))
                return 2.0 * p * dell * (u - np.sum(u * p, -1, keepdims=True))
            """),
    ],
    "signexp-at-zero": [
        ("through the weight p_j = 1/(R + 1) of the zero", """
            import numpy as np
            def _p_V(s, u):
                e = np.exp(np.abs(s))
                return 1.0 / np.sum(e), np.sum(u * np.sign(s) * e)
            def jump(s, u, j):
                p, _ = _p_V(s, u)
                return 2.0 * u[j] * p
            def slopes(s, u, j):
                p, V = _p_V(s, u)
                return u[j] * p * (1.0 - p) - V * p * p, u[j] * p * (1.0 - p) + V * p * p
            def central_at_zero(s, u, j, eps):
                p, _ = _p_V(s, u)
                return u[j] * p / eps + u[j] * p * (1.0 - p)
            """),
        ("the sums shifted by the largest |s| (no overflow), R as the sum over the other entries", """
            import numpy as np
            def _sums(s, u, j):
                a = np.abs(s)
                m = a.max()
                e = np.exp(a - m)
                zero = np.exp(-m)
                return np.sum(e) - zero, np.sum(u * np.sign(s) * e), zero
            def jump(s, u, j):
                R, _, zero = _sums(s, u, j)
                return 2.0 * u[j] * zero / (R + zero)
            def slopes(s, u, j):
                R, V, zero = _sums(s, u, j)
                d = (R + zero) ** 2
                return zero * (u[j] * R - V) / d, zero * (u[j] * R + V) / d
            def central_at_zero(s, u, j, eps):
                a, b = slopes(s, u, j)
                return jump(s, u, j) / (2.0 * eps) + 0.5 * (a + b)
            """),
    ],
    "tanhmax-velocity": [
        ("log-sum-exp of log cosh, the weights by exp", """
            import numpy as np
            def velocity(s, o, c, delta_I):
                a = np.abs(s)
                ell = a + np.log1p(np.exp(-2.0 * a)) - np.log(2.0)
                m = ell.max(-1, keepdims=True)
                wt = np.exp(ell - m - np.log(np.sum(np.exp(ell - m), -1, keepdims=True)))
                wh = np.tanh(s) * wt
                return -delta_I * c[:, None] * (wt * o - wh * np.sum(wh * o, -1, keepdims=True))
            """),
        ("Eq. 01.R5 with rho' + rho ell' = 1, einsum for the row scalar, row by row", """
            import numpy as np
            def velocity(s, o, c, delta_I):
                out = np.empty_like(s)
                for i in range(s.shape[0]):
                    a = np.abs(s[i])
                    ell = a + np.log1p(np.exp(-2.0 * a))
                    p = np.exp(ell - ell.max())
                    p /= p.sum()
                    t = np.tanh(s[i])
                    dII = o[i] * p - p * t * np.einsum("j,j->", o[i], t * p)
                    out[i] = -c[i] * delta_I[i] * dII
                return out
            """),
    ],
    "prop1-new-activation": [
        ("w ell' = sigmoid / sum softplus, computed as one factor", """
            import numpy as np
            def delta_II(s, o):
                sp = np.logaddexp(0.0, s)
                z = np.sum(sp, -1, keepdims=True)
                sig = np.exp(-np.logaddexp(0.0, -s))
                return sig / z * (o - np.sum(sp / z * o, -1, keepdims=True))
            """),
        ("the log domain: ell = log softplus, w = softmax(ell), ell' = e^{log sigmoid - ell}", """
            import numpy as np
            def delta_II(s, o):
                sp = np.logaddexp(0.0, s)
                with np.errstate(divide="ignore"):
                    ell = np.where(s < -30.0, s - 0.5 * np.exp(s), np.log(sp))
                m = np.max(ell, -1, keepdims=True)
                w = np.exp(ell - m)
                w = w / np.sum(w, -1, keepdims=True)
                dell = np.exp(-np.logaddexp(0.0, -s) - ell)
                return w * dell * (o - np.sum(w * o, -1, keepdims=True))
            """),
    ],
    "closure-gap": [
        ("2 sigmoid(log q)", """
            import numpy as np
            def gap(s, c):
                lq = -2.0 * c + np.logaddexp.reduce(-s) - np.logaddexp.reduce(s)
                return 2.0 * np.exp(-np.logaddexp(0.0, -lq))
            """),
        ("2q/(1+q) or 2/(1+1/q), whichever stays in range", """
            import math
            import numpy as np
            def gap(s, c):
                lq = -2.0 * c + float(np.logaddexp.reduce(-s)) - float(np.logaddexp.reduce(s))
                if lq < 0:
                    q = math.exp(lq)
                    return 2.0 * q / (1.0 + q)
                return 2.0 / (1.0 + math.exp(-lq))
            """),
    ],
    "neural-score-vjp": [
        ("einsum for every contraction", """
            import numpy as np
            def neural_vjp(q, k, params, grad_s):
                P = params
                beta = 1.0 / np.sqrt(q.shape[1])
                qp, kp = np.einsum("id,ed->ie", q, P["Wq"]), np.einsum("jd,ed->je", k, P["Wk"])
                z = np.einsum("ie,he->ih", qp, P["Whq"])[:, None] + np.einsum("je,he->jh", kp, P["Whk"])[None] + P["bh"]
                t = np.tanh(z)
                g = beta * grad_s
                gz = g[..., None] * P["wa"] * (1.0 - t * t)
                da, db = np.einsum("ijh->ih", gz), np.einsum("ijh->jh", gz)
                dqp, dkp = np.einsum("ih,he->ie", da, P["Whq"]), np.einsum("jh,he->je", db, P["Whk"])
                dp = {"Wq": np.einsum("ie,id->ed", dqp, q), "Wk": np.einsum("je,jd->ed", dkp, k),
                      "Whq": np.einsum("ih,ie->he", da, qp), "Whk": np.einsum("jh,je->he", db, kp),
                      "bh": gz.sum((0, 1)), "wa": np.einsum("ij,ijh->h", g, t), "ba": g.sum()}
                return np.einsum("ie,ed->id", dqp, P["Wq"]), np.einsum("je,ed->jd", dkp, P["Wk"]), dp
            """),
        ("a loop over the queries, beta applied last", """
            import numpy as np
            def neural_vjp(q, k, params, grad_s):
                P = params
                beta = 1.0 / np.sqrt(q.shape[1])
                qp, kp = q @ P["Wq"].T, k @ P["Wk"].T
                a, b = qp @ P["Whq"].T, kp @ P["Whk"].T
                da = np.zeros_like(a)
                db = np.zeros_like(b)
                dwa = np.zeros_like(P["wa"])
                for i in range(q.shape[0]):
                    t = np.tanh(a[i] + b + P["bh"])
                    gz = grad_s[i][:, None] * P["wa"] * (1.0 - t * t)
                    da[i] = gz.sum(0)
                    db += gz
                    dwa += grad_s[i] @ t
                da, db = beta * da, beta * db
                dqp, dkp = da @ P["Whq"], db @ P["Whk"]
                dp = {"Wq": dqp.T @ q, "Wk": dkp.T @ k, "Whq": da.T @ qp, "Whk": db.T @ kp,
                      "bh": da.sum(0), "wa": beta * dwa, "ba": beta * grad_s.sum()}
                return dqp @ P["Wq"], dkp @ P["Wk"], dp
            """),
    ],
    "expressive-angle": [
        ("a secant method on the log contrast gap, started from a bracket", """
            import math
            def _gap(c, ct):
                dpa = c * (1.0 - ct)
                ea = math.log1p(c * c * ct * ct) - math.log1p(c * c) - 2.0 * math.log(ct)
                return dpa - ea
            def crossover(theta):
                ct = math.cos(theta)
                lo, hi = 1e-12, 1.0
                while _gap(hi, ct) < 0:
                    hi *= 2.0
                for _ in range(100):
                    mid = 0.5 * (lo + hi)
                    if _gap(mid, ct) < 0:
                        lo = mid
                    else:
                        hi = mid
                    if hi - lo <= 1e-15 * hi:
                        break
                return 0.5 * (lo + hi)
            """),
        ("Newton's method on the gap in c, from the bisection's bracket", """
            import math
            def _gap(c, ct):
                return c * (1.0 - ct) - math.log((1.0 + c * c * ct * ct) / ((1.0 + c * c) * ct * ct))
            def _dgap(c, ct):
                return (1.0 - ct) - 2.0 * c * ct * ct / (1.0 + c * c * ct * ct) + 2.0 * c / (1.0 + c * c)
            def crossover(theta):
                ct = math.cos(theta)
                lo, hi = 1e-9, 1.0
                while _gap(hi, ct) < 0:
                    hi *= 2.0
                for _ in range(60):
                    mid = math.sqrt(lo * hi)
                    lo, hi = (mid, hi) if _gap(mid, ct) < 0 else (lo, mid)
                c = math.sqrt(lo * hi)
                for _ in range(3):
                    c -= _gap(c, ct) / _dgap(c, ct)
                return c
            """),
    ],
    "no-normaliser": [
        ("s^2/(1+s^2) below 1, 1/(1+1/s^2) above, the sqrt(tiny) rule by |s|", """
            import math
            import numpy as np
            TINY = math.sqrt(np.finfo(np.float64).tiny)
            def expressive_weights(s, mask=None):
                a = np.abs(s)
                with np.errstate(all="ignore"):
                    h = np.where(a <= 1.0, a * a / (1.0 + a * a), 1.0 / (1.0 + 1.0 / (a * a)))
                h = np.where(a < TINY, 0.0, h)
                if mask is not None:
                    h = np.where(mask, h, 0.0)
                z = np.sum(h, axis=-1, keepdims=True)
                with np.errstate(all="ignore"):
                    return np.where(z > 0, h / np.where(z > 0, z, 1.0), 0.0)
            """),
        ("the log domain: ell = log h, softmax of ell, rows without a normaliser 0", """
            import math
            import numpy as np
            TINY = math.sqrt(np.finfo(np.float64).tiny)
            def expressive_weights(s, mask=None):
                a = np.abs(s)
                keep = a >= TINY
                if mask is not None:
                    keep = keep & mask
                safe = np.where(keep, a, 1.0)
                ell = np.where(keep, -np.log1p(1.0 / (safe * safe)), -np.inf)
                m = np.max(ell, axis=-1, keepdims=True)
                e = np.exp(ell - np.where(np.isfinite(m), m, 0.0))
                z = np.sum(e, axis=-1, keepdims=True)
                return np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0)
            """),
    ],
    "central-difference-step": [
        ("np.cbrt, the terms of E(h) in another order", """
            import numpy as np
            U = 2.0 ** -53
            def best_step(S, M, kappa=1.0):
                return float(np.cbrt(3.0 * kappa * U * S / M))
            def error_bound(h, S, M, kappa=1.0):
                return kappa * U * S / h + h * h * M / 6.0
            """),
        ("through logarithms", """
            import math
            U = 2.0 ** -53
            def best_step(S, M, kappa=1.0):
                return math.exp((math.log(3.0 * kappa) + math.log(U) + math.log(S) - math.log(M)) / 3.0)
            def error_bound(h, S, M, kappa=1.0):
                return (M * h ** 3 / 6.0 + kappa * U * S) / h
            """),
    ],
    "closure-witness": [
        ("the closed form of the smallest shift", """
            import math
            s = [0.5, -1.0, 1.5, 0.2]
            A, B = sum(math.exp(x) for x in s), sum(math.exp(-x) for x in s)
            q = 1e-6 / (2.0 - 1e-6)
            ANSWER = 0.5 * math.log(B / (A * q))
            """),
        ("bisection on the gap's closed form", """
            import math
            s = [0.5, -1.0, 1.5, 0.2]
            A, B = sum(math.exp(x) for x in s), sum(math.exp(-x) for x in s)
            def gap(c):
                q = math.exp(-2.0 * c) * B / A
                return 2.0 * q / (1.0 + q)
            lo, hi = 0.0, 50.0
            for _ in range(200):
                mid = 0.5 * (lo + hi)
                lo, hi = (lo, mid) if gap(mid) <= 1e-6 else (mid, hi)
            ANSWER = hi
            """),
    ],
}
