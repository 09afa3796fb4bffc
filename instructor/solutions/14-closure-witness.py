"""Exercise 14: the smallest shift c with closure gap <= 1e-6.

Statement: 14-closure-witness.md. Set ANSWER (you may compute it here), then
check it, in the handout's folder (set up as its README.md says), with

    .venv/bin/refattn exercises check closure-witness 14-closure-witness.py

Allowed: NumPy and Python's standard library.
"""

import math

ANSWER = None  # the smallest shift c, a float
### BEGIN SOLUTION
# For s = (0.5, -1, 1.5, 0.2): 2q / (1 + q) = 1e-6 gives q = 1e-6 / (2 - 1e-6), and
# q = e^{-2c} B / A gives c = (log(B / A) - log q) / 2.
_s = (0.5, -1.0, 1.5, 0.2)
_A = sum(math.exp(x) for x in _s)
_B = sum(math.exp(-x) for x in _s)
_q = 1e-6 / (2.0 - 1e-6)

ANSWER = 0.5 * (math.log(_B / _A) - math.log(_q))  # 6.9694...
### END SOLUTION
