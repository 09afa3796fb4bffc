"""Exercise 10: the VJP of the Neural Attention score (shared weights, tanh).

Statement: 10-neural-score-vjp.md. Fill in the body of the function, then check
it, in the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check neural-score-vjp 10-neural-score-vjp.py

Allowed: NumPy and Python's standard library.
"""

### BEGIN SOLUTION
# Forward: q' = q Wq^T, k' = k Wk^T, z_ij = Whq q'_i + Whk k'_j + bh,
# s_ij = beta (wa . tanh(z_ij) + ba), beta = 1/sqrt(d).
# Backward, with G = beta grad_s and gz_ij = G_ij wa (1 - tanh^2 z_ij):
# dba = sum G, dwa = sum_ij G_ij tanh(z_ij), dbh = sum_ij gz_ij,
# dWhq = sum_i (sum_j gz_ij) q'_i^T, dq'_i = Whq^T sum_j gz_ij (keys alike, summing over i),
# dWq = dq'^T q, dq = dq' Wq.
### END SOLUTION
import numpy as np


def neural_vjp(q, k, params, grad_s):
    """``(dq, dk, dparams)`` of the neural score for the upstream gradient ``grad_s``.

    Parameters
    ----------
    q : ndarray (n_q, d)
    k : ndarray (n_k, d)
    params : dict
        ``Wq (d', d)``, ``Wk (d', d)``, ``Whq (h, d')``, ``Whk (h, d')``,
        ``bh (h,)``, ``wa (h,)``, ``ba ()``.
    grad_s : ndarray (n_q, n_k)

    Returns
    -------
    tuple
        ``dq`` (n_q, d), ``dk`` (n_k, d) and ``dparams``, a dict with the keys
        and shapes of ``params``.
    """
    ### BEGIN SOLUTION
    Wq, Wk, Whq, Whk = params["Wq"], params["Wk"], params["Whq"], params["Whk"]
    bh, wa = params["bh"], params["wa"]
    beta = 1.0 / np.sqrt(q.shape[-1])
    qp, kp = q @ Wq.T, k @ Wk.T  # (n_q, d'), (n_k, d')
    z = (qp @ Whq.T)[:, None, :] + (kp @ Whk.T)[None, :, :] + bh  # (n_q, n_k, h)
    t = np.tanh(z)
    G = beta * grad_s  # (n_q, n_k)
    gz = G[..., None] * wa * (1.0 - t * t)  # (n_q, n_k, h)
    da, db = gz.sum(axis=1), gz.sum(axis=0)  # (n_q, h), (n_k, h)
    dqp, dkp = da @ Whq, db @ Whk  # (n_q, d'), (n_k, d')
    dparams = {"Wq": dqp.T @ q, "Wk": dkp.T @ k, "Whq": da.T @ qp, "Whk": db.T @ kp,
               "bh": gz.sum(axis=(0, 1)), "wa": np.einsum("ij,ijh->h", G, t), "ba": np.sum(G)}
    return dqp @ Wq, dkp @ Wk, dparams
    ### END SOLUTION
