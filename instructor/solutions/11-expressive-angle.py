"""Exercise 11: where dot-product and expressive attention are equally sharp.

Statement: 11-expressive-angle.md. Fill in the body of the function, then check
it, in the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check expressive-angle 11-expressive-angle.py

Allowed: NumPy and Python's standard library.
"""

### BEGIN SOLUTION
# Contrast of the parallel key against a key at angle theta, c = beta |q| |k|:
# DPA e^{c (1 - cos theta)} (EG3), rising from 1; EA (1 + c^2 cos^2) / ((1 + c^2) cos^2) (EG4),
# falling from 1/cos^2. Their difference changes sign once: bisection on log c.
### END SOLUTION
import math


def crossover(theta):
    """``c*(theta)``: the positive ``c`` at which both contrasts are equal (``theta`` in radians, in (0, pi/2))."""
    ### BEGIN SOLUTION
    ct = math.cos(theta)

    def diff(c):  # log DPA contrast - log EA contrast: increasing in c
        return c * (1.0 - ct) - math.log((1.0 + (c * ct) ** 2) / ((1.0 + c * c) * ct * ct))

    lo, hi = 1e-12, 1.0
    while diff(hi) < 0:
        hi *= 2.0
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if diff(mid) < 0:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)
    ### END SOLUTION
