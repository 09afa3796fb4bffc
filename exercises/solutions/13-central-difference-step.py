"""Model solution of exercise 13: the best central-difference step (derivation 22, C6).

E(h) = M h^2 / 6 + kappa u S / h, u = 2^-53;  E'(h) = M h / 3 - kappa u S / h^2 = 0
gives h* = (3 kappa u S / M)^(1/3).
"""

U = 2.0 ** -53


def error_bound(h, S, M, kappa=1.0):
    return M * h * h / 6.0 + kappa * U * S / h


def best_step(S, M, kappa=1.0):
    return (3.0 * kappa * U * S / M) ** (1.0 / 3.0)
