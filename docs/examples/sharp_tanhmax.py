"""An activation of your own, for ``refattn check --activation``.

TanhMax at twice the sharpness: g(s) = sinh(2s), h(s) = cosh(2s), so that
phi(s)_i = sinh(2 s_i) / sum_k cosh(2 s_k) (TanhMax, Eq. 5). ``g`` and ``h``
are written with ``autograd.numpy``; their derivatives come from autograd.
Check it from the repository's root with

    .venv/bin/refattn check --activation docs/examples/sharp_tanhmax.py:sharp_tanhmax

``docs/verify.md`` walks through what the check does.
"""

import autograd.numpy as anp

import refattn

sharp_tanhmax = refattn.define_activation(
    "sharp_tanhmax",
    g=lambda s: anp.sinh(2.0 * s),  # numerator g(s), odd: signed weights
    h=lambda s: anp.cosh(2.0 * s),  # normaliser h(s) >= 1 > 0
)
