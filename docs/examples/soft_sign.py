"""A researcher's activation, checked by refattn (docs/verify.md): the soft sign of s over 1 + |s|.

    g(s) = s / (1 + |s|),   h(s) = 1 + |s|,   so   phi(s)_i = g(s_i) / sum_k h(s_k).

Signed weights like TanhMax's, with a normaliser that grows like |s| instead of e^|s|. The
derivatives are written by hand and checked against autograd's when the file is loaded:

    g'(s) = 1 / (1 + |s|)^2,   h'(s) = sign(s).

h has a kink at s = 0 (slopes -1 and +1): it is declared, and there dh gives 0, which is
what autograd gives for abs at 0 (its convention); refattn check shows both slopes.
"""

import autograd.numpy as anp

import refattn


def g(s):
    return s / (1.0 + anp.abs(s))


def h(s):
    return 1.0 + anp.abs(s)


def dg(s):
    return 1.0 / (1.0 + anp.abs(s)) ** 2


def dh(s):
    return anp.sign(s)  # sign(0) = 0: autograd's slope of abs at its kink


soft_sign = refattn.define_activation("soft_sign", g, h, dg, dh, singular_scores=[0.0], regularity="kink",
                                      source="docs/examples/soft_sign.py: s / (1 + |s|) over 1 + |s|")


# Three mistakes a researcher makes, each given as a dict of define_activation's arguments, so that
# ``refattn check --activation docs/examples/soft_sign.py`` checks the file's four activations one by one
# and a wrong one does not hide the others (docs/verify.md, section 3).

#: dh with its sign forgotten: wrong for every s < 0, and reported there, not at the kink.
sign_forgotten = {"g": g, "h": h, "dg": dg, "dh": lambda s: 1.0 + 0.0 * s, "singular_scores": [0.0]}

#: a one-sided slope at the declared kink: dh(0) = 1 where autograd's convention is 0.
one_sided_at_kink = {"g": g, "h": h, "dg": dg, "dh": lambda s: anp.where(s >= 0.0, 1.0, -1.0),
                     "singular_scores": [0.0]}

#: dg wrong only for |s| > 12: it passes over the default range [-10, 10]; --range -20,20 catches it.
wrong_far_out = {"g": g, "h": h, "dg": lambda s: anp.where(anp.abs(s) > 12.0, 0.0, dg(s)), "dh": dh,
                 "singular_scores": [0.0]}
