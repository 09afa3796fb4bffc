# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 03 — Score dynamics in training, and TanhMax's polarity experiment
#
# Two experiments of TanhMax:
#
# 1. **Proposition 1 against gradient descent** (`refattn dynamics`): the
#    change of each token's score per step, divided by the step, against the
#    predicted velocity $ds/d\tau$ (`derivations/12-score-dynamics-experiment.md`),
#    trained by the tiny trainer, `refattn.studies.score_dynamics.gradient_descent`:
#    plain full-batch gradient descent, a dozen lines, no checkpoints or files.
# 2. **The synthetic polarity experiment** (TanhMax section 5.1, Fig. 2;
#    `refattn polarity`), trained in minibatches with Adam by
#    `refattn.training.classifier.train_classifier` over the heavier trainer
#    `refattn.training.train` (all seeds batched, resumable checkpoints):
#    attention scores and weights of positive, negative
#    and neutral tokens after training, over several seeds — with the sign
#    pattern of the two polar groups, which the model's symmetry leaves
#    undetermined, and the logit contributions $w_e o_e$, which it does not.
#
# `REFATTN_SMALL=1` runs everything at a small size (as the test suite does);
# `REFATTN_FIGDIR` saves the figures.

# %%
import os

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from refattn.plots import save, start  # noqa: E402
from refattn.studies import polarity, score_dynamics  # noqa: E402
from refattn.studies.polarity import run_polarity  # noqa: E402
from refattn.training.tasks.polarity import TANHMAX_SMALL, PolarityConfig  # noqa: E402

SMALL = start()  # REFATTN_SMALL=1: small sizes; figures go to REFATTN_FIGDIR, or figures/ run as a script

# %% [markdown]
# ## 1. Proposition 1 against finite steps
#
# One full-batch step of size $\eta$ moves each score by $\Delta s$; by
# Taylor's theorem $\Delta s/\eta = ds/d\tau + O(\eta)$. With free per-token
# $Q, K$ the prediction of Proposition 1 *is* $ds/d\tau$, so the error shrinks
# tenfold with each tenfold smaller step. With TanhMax's shared projections it
# does not (the neglected terms of (03.P7) and the wrong $\Delta_I$), while the
# exact velocity $-J\nabla R$ still agrees to first order.

# %% [markdown]
# The trainer, whole:

# %%
import inspect  # noqa: E402

print(inspect.getsource(score_dynamics.gradient_descent))

# %%
summary = score_dynamics.run(score_dynamics.Settings(steps=60 if SMALL else 400, eta=0.5))  # refattn dynamics
print(score_dynamics.report(summary))
fig = score_dynamics.plot(summary)
save(fig, "03_score_dynamics")

# %% [markdown]
# Top row: mean score of each token group, measured (solid) and predicted by
# integrating Proposition 1's velocity along the actual parameter path
# (dashed). Under the assumption the two curves lie on top of each other;
# under shared projections they part at once. Bottom row: the relative error
# of $\Delta s/\eta$ against the step size.

# %% [markdown]
# ## 2. TanhMax's Figure 2, over seeds
#
# Sentences of 2 polar tokens of the label's class and 10 neutral tokens
# (TanhMax's configuration with 10,000 sentences over 2,000 tokens; a smaller
# one here when `REFATTN_SMALL=1`). Four activations, several seeds, every
# seed of an activation trained in one batched program.

# %%
config = PolarityConfig(n_pos=20, n_neg=20, n_neutral=200, n_per_class=600, seed=0) if SMALL else TANHMAX_SMALL
result = run_polarity(polarity.Settings(activations=("softmax", "tanhmax", "signexp", "expressive"),
                                        seeds=3 if SMALL else 10, config=config, epochs=4 if SMALL else 20))
print(polarity.report(result))

# %% [markdown]
# Read the per-seed lines: softmax gives both polar groups large positive
# weights (its weights cannot be negative); tanhmax and signexp give the two
# groups opposite signs in some seeds and the same sign in others, because
# negating $W_q, b_q$ and the output weights is an exact symmetry of the
# model, and because the value path can carry the polarity instead
# (`derivations/12-score-dynamics-experiment.md`, section 4). In every
# converged run the *contributions* $w_e o_e$ have the sign of the token's
# polarity: that is what the model identifies.

# %%
fig = polarity.plot(result)
save(fig, "03_polarity_fig2")

# %%
acts = list(result["activations"])
frac = [result["activations"][a]["opposite_fraction"] for a in acts]
fig, ax = plt.subplots(figsize=(4.5, 2.8))
ax.bar(acts, frac, color="0.4")
ax.set_ylim(0, 1)
ax.set_ylabel("fraction of seeds")
ax.set_title("polar groups with opposite-sign weights")
save(fig, "03_opposite_fraction")
print(dict(zip(acts, np.round(frac, 2))))

# %% [markdown]
# ## 3. Are the weights an explanation? TanhMax's Table 1
#
# TanhMax section 5.2 asks whether attention weights agree with two other
# importance measures of each token: the gradient of the output with respect
# to the token's embedding (here the signed gradient × input,
# $\langle \partial \hat y/\partial x_i, x_i\rangle$) and the output change
# when the token is left out. It reports Kendall's $\tau$ between the weights
# and each measure, the fraction of instances where $\tau$ is significant at
# $\alpha = 0.01$, and how much the output moves when the weights are
# permuted or replaced by random ones (`refattn interpret`;
# `derivations/13-interpretability.md`). Signed activations are oriented
# first (the model's sign symmetry again), so that a positive $\tau$ means
# "agrees". On SST-2 the same command runs with `--data sst2`
# (`derivations/14-sst2.md`); here the synthetic sentences keep it quick.

# %%
from refattn.studies import interpret
from refattn.studies.interpret import run_interpret

interp = run_interpret(interpret.Settings(activations=("softmax", "tanhmax"), data="synthetic",
                                          seeds=1 if SMALL else 3, epochs=2 if SMALL else 8,
                                          n_instances=24 if SMALL else 300, draws=5 if SMALL else 100),
                       progress=False)
print(interpret.report(interp))
save(interpret.plot(interp), "03_interpret_table1")
