"""Experiments: one module per seed figure or table. Each returns data (arrays,
small dataclasses, or JSON-ready dicts); figures are drawn by the notebooks and by
``refattn <command> --out DIR``.

* :mod:`refattn.studies.geometry`: attention weight against the
  query-key angle for dot-product and expressive attention (Expressive, Fig. 1);
  ``derivations/07-expressive-geometry.md``.
* :mod:`refattn.studies.neural_surface`: the score surface on the
  diagonal ``q = k`` and a regression that a bilinear score cannot fit but
  the Neural Attention MLP can (NeuralAttn, Fig. 1, Eqs. 2-4);
  ``derivations/08-neural-attention-expressivity.md``.

Training experiments (each behind a ``refattn`` command): ``score_dynamics``
(``dynamics``), ``polarity``, ``interpret``, ``sst2``, ``nt_training``
(``nt``), ``nt_figures`` (``nt-figure``), ``rank_collapse``
(``rank-collapse``), ``neural_cost`` (``neural-cost``), ``lm``; derivations
12-19 describe them.
"""

