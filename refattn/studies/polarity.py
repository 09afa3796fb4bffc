r"""TanhMax's synthetic polarity experiment (its Fig. 2), over many seeds, with honest read-outs.

Train :class:`refattn.training.models.polarity.PolarityClassifier` on synthetic
sentences (:mod:`refattn.training.tasks.polarity`) for several activations, all seeds
of an activation as one batched program (:func:`refattn.training.train.train`), and
report per seed the mean attention score and weight of the positive, negative
and neutral tokens, the tokens' contributions to the logit (weight x polarity
score ``o_e``, which the model's sign symmetry leaves unchanged), test accuracy
and the *sign pattern* of the two polar groups' weights: opposite, both
positive or both negative (``derivations/12-score-dynamics-experiment.md``,
section 4, explains why the sign is not identifiable).

Token groups are those of TanhMax Eq. 11 (gamma_e with the paper's
thresholds, on the training split; :func:`refattn.training.tasks.polarity.polarity_groups`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..core.checks import check_int

from ..training.models.polarity import PolarityClassifier, dropout_mask
from ..training.optim import SGD, Adadelta, Adagrad, Adam
from ..training.tasks.polarity import (
    NEGATIVE,
    NEUTRAL,
    POSITIVE,
    TANHMAX_SMALL,
    make_polarity,
    polarity_groups,
    token_polarity,
)
from ..plots import GROUP_COLOURS
from ..training.runs import check_memory
from ..training.train import Progress, batch_iterator, checkpoint_paths, train
from ..core.activations import ACTIVATIONS
from . import max_memory, option

__all__ = ["PAPER_FIG2", "OPTIMISERS", "Settings", "train_classifier", "run_polarity", "run", "report", "plot"]

#: The authors' public-code numbers for the TanhMax (self score) and softmax runs
#: (mean over tokens of each group).
PAPER_FIG2 = {
    "tanhmax": {"score": {"positive": 7.10, "negative": -8.70, "neutral": 0.63},
                "weight": {"positive": 0.48, "negative": -0.49, "neutral": 0.0}},
    "softmax": {"weight": {"positive": 0.48, "negative": 0.48}},
}

def _adadelta_code(params, lr=0.05):
    """TanhMax's public code: PyTorch's ``Adadelta(lr=0.05)`` (rho 0.9, eps 1e-6) on 100 x the mean BCE."""
    return Adadelta(params, lr=lr, rho=0.9, eps=1e-6, loss_scale=100.0)


#: Optimisers by name (``optimizer=``); ``"adadelta-code"`` is the setting of TanhMax's public code.
OPTIMISERS = {"adam": Adam, "adadelta": Adadelta, "adadelta-code": _adadelta_code, "adagrad": Adagrad, "sgd": SGD}
_GROUPS = (("positive", POSITIVE), ("negative", NEGATIVE), ("neutral", NEUTRAL))

#: The figure ``refattn polarity --out DIR`` writes.
FIGURE = "polarity_fig2.png"


@dataclass
class Settings:
    """TanhMax's synthetic polarity experiment (Fig. 2) over many seeds: scores, weights, logit contributions
    and sign patterns per group."""

    activations: tuple[str, ...] = option(("softmax", "tanhmax", "signexp", "expressive"),
                                          "comma-separated activations", one_of=ACTIVATIONS)
    seeds: int = option(10, "number of seeds", low=1)
    score: str = option("self", "score", choices=("self", "global", "additive"))
    epochs: int = option(20, "epochs", low=1)
    optimizer: str = option("adam", "optimiser (adadelta-code: TanhMax's public code, Adadelta(0.05) on 100 x BCE)",
                            choices=tuple(OPTIMISERS))
    lr: float = option(1e-2, "learning rate", positive=True)
    checkpoint_dir: str | None = option(None, "folder for resumable checkpoints, one per activation",
                                        output="checkpoint_dir")
    max_memory: float | None = max_memory()


def _per_token_mean(values, tokens, mask, V):
    """Mean of ``values`` (S, B, L) over every occurrence of each token id: (S, V)."""
    S = values.shape[0]
    out = np.full((S, V), np.nan)
    counts = np.bincount(tokens[mask], minlength=V)
    seen = counts > 0
    for k in range(S):
        sums = np.bincount(tokens[mask], weights=values[k][mask], minlength=V)
        out[k, seen] = sums[seen] / counts[seen]
    return out


def _finite_mean(values):
    """The mean of the finite numbers among ``values`` (None where there is none)."""
    vals = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(vals)) if vals else None


def _first_non_finite_epoch(history, k):
    """The first epoch (1-based) whose training loss of seed ``k`` is not finite, or None."""
    for i, h in enumerate(history, 1):
        if not np.isfinite(h["loss"][k]):
            return i
    return None


def _pattern(wp, wn):
    if wp is None or wn is None or not (np.isfinite(wp) and np.isfinite(wn)):
        return "undefined"  # a diverged run, or a group never seen in the test split
    if wp > 0 and wn < 0 or wp < 0 and wn > 0:
        return "opposite"
    if wp > 0 and wn > 0:
        return "both positive"
    if wp < 0 and wn < 0:
        return "both negative"
    return "zero"


def train_classifier(tokens, labels, vocab_size, activation, *, seeds, mask=None, score="self", epochs=8,
                     batch_size=100, optimizer="adam", lr=1e-2, dropout=0.5, checkpoint=None, progress=None,
                     fingerprint_extra=None, grad="analytic", embed_dim=30, callbacks=()):
    """Train TanhMax's classifier on ``tokens (n, L)``, ``labels (n,)`` for every seed at once.

    Batches come from :func:`refattn.training.train.batch_iterator` (order seeded by
    (seed, epoch)); dropout masks from ``(seed, epoch, batch)``. ``mask (n, L)``
    marks real tokens (padding False). ``grad="autograd"`` differentiates the
    model's loss with autograd instead of its hand-derived backward (the same
    trajectory to rounding; ``tests/test_polarity_experiment.py``).
    ``embed_dim`` is the embedding size (TanhMax's 30 by default);
    ``callbacks`` go to :func:`refattn.training.train.train` (``cb(epoch, params)``
    after every epoch, its dict into the history). Returns
    ``(model, params, train_output)``.
    """
    seeds = tuple(int(s) for s in seeds)
    if optimizer not in OPTIMISERS:
        raise ValueError(f"optimizer: expected one of {tuple(OPTIMISERS)}, got {optimizer!r}")
    tokens = np.asarray(tokens, dtype=np.int64)
    labels = np.asarray(labels, dtype=float)
    model = PolarityClassifier(vocab_size, activation=activation, score=score, dropout=dropout, embed_dim=embed_dim)
    params = model.init_params(seeds)
    opt = OPTIMISERS[optimizer](params, lr=lr)

    def make_batches(epoch):
        out = []
        for b, idx in enumerate(batch_iterator(len(tokens), batch_size, seeds=seeds, epoch=epoch)):
            batch = {"tokens": tokens[idx], "labels": labels[idx]}
            if mask is not None:
                batch["mask"] = mask[idx]
            if dropout > 0:
                rngs = [np.random.default_rng([s, epoch, b, 1]) for s in seeds]
                batch["dropout"] = dropout_mask(rngs, idx.shape[1], model.hidden_dim, dropout)
            out.append(batch)
        return out

    fp = {"activation": activation, "seeds": list(seeds), "score": score, "epochs": epochs, "lr": lr,
          "optimizer": optimizer, "batch_size": batch_size, "dropout": dropout, "n": int(len(tokens)),
          **({"embed_dim": embed_dim} if embed_dim != 30 else {}), **(fingerprint_extra or {})}
    out = train(model, params, opt, make_batches, epochs=epochs, checkpoint=checkpoint, fingerprint=fp, grad=grad,
                callbacks=list(callbacks),
                progress=Progress(epochs, enabled=progress, label=f"{activation}"))
    return model, params, out


def classifier_memory(seeds, tokens, embed_dim=30):
    """Bytes that training and evaluating TanhMax's classifier on ``tokens`` (padded) tokens needs
    at its peak, for ``seeds`` seeds at once, estimated before any work.

    Every array of the run carries the seed axis; the largest are the forward
    pass over the data set and the per-token means, about ``100 + 1.5 E`` bytes
    per token and seed (``E`` the embedding size) as tracemalloc measures them:
    240 at ``E = 30`` for the polarity data, 108 to 555 for SST-2 sentences at
    ``E`` = 4 to 300. The estimate allows ``200 + 4 E``
    (``tests/test_runs.py::test_memory_estimates_bound_the_measured_peaks``,
    ``tests/test_run_safety.py``).
    """
    return int(seeds) * int(tokens) * (200 + 4 * int(embed_dim)) + 8 * 2**20


def memory_estimate(seeds, config=TANHMAX_SMALL):
    """Bytes :func:`run_polarity` needs at its peak, estimated before any work: :func:`classifier_memory`
    of the data set (120,000 tokens for ``TANHMAX_SMALL``)."""
    return classifier_memory(seeds, 2 * config.n_per_class * (config.polar_per_sentence + config.neutral_per_sentence))


def run_polarity(activations=("softmax", "tanhmax", "signexp", "expressive"), *, seeds=10, config=TANHMAX_SMALL,
                 score="self", epochs=8, batch_size=100, optimizer="adam", lr=1e-2, dropout=0.5,
                 converged=0.99, progress=None, checkpoint_dir=None, on_result=None, max_memory=None):
    """Train every activation over ``seeds`` seeds; read out what Fig. 2 shows, per seed.

    Parameters
    ----------
    on_result : callable, optional
        Called as ``on_result(activation, result)`` as each activation finishes
        (the command line writes it to disk, so a later failure loses nothing).
    max_memory : float, optional
        GiB the run may use; a larger :func:`memory_estimate` is refused before
        any work (default: the memory available now).

    Returns
    -------
    dict (JSON-able)
        ``settings``; per activation ``per_seed`` (test accuracy, mean score,
        weight and logit contribution ``w * o`` of each group, sign pattern,
        ``converged``), ``mean`` over seeds, ``opposite_fraction`` (fraction of
        seeds whose polar groups have weights of opposite sign) and
        ``contributions_signed_as_polarity`` (fraction of converged seeds whose
        positive tokens contribute positively and negative tokens negatively);
        ``paper`` (the authors' numbers) and ``seconds``.
    """
    epochs = check_int(epochs, "epochs", 1)
    if optimizer not in OPTIMISERS:
        raise ValueError(f"optimizer: expected one of {tuple(OPTIMISERS)}, got {optimizer!r}")
    n_seeds = seeds if isinstance(seeds, (int, np.integer)) else len(tuple(seeds))
    check_memory(memory_estimate(n_seeds, config), f"{n_seeds} seeds", max_memory)
    seeds = tuple(range(seeds)) if isinstance(seeds, (int, np.integer)) else tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("seeds: expected at least one seed")
    checkpoints = checkpoint_paths(checkpoint_dir, "polarity", activations)  # checked before the first epoch
    t_start = time.perf_counter()
    data = make_polarity(config)
    tr_tok, tr_lab = data.tokens[data.train_idx].astype(np.int64), data.labels[data.train_idx].astype(float)
    te_tok, te_lab = data.tokens[data.test_idx].astype(np.int64), data.labels[data.test_idx]
    V, S = data.vocab_size, len(seeds)
    pol = token_polarity(tr_tok, data.labels[data.train_idx], V)
    groups = polarity_groups(pol.gamma, pol.f_pos, pol.f_neg)
    results = {}
    for act in activations:
        ck = checkpoints[act]
        model, params, out = train_classifier(tr_tok, tr_lab, V, act, seeds=seeds, score=score, epochs=epochs,
                                              batch_size=batch_size, optimizer=optimizer, lr=lr, dropout=dropout,
                                              checkpoint=ck, progress=progress,
                                              fingerprint_extra={"config": repr(config)})
        test_batch = {"tokens": np.broadcast_to(te_tok, (S,) + te_tok.shape)}
        fwd = model.outputs(params, test_batch)
        acc = np.mean((fwd["logit"] > 0) == (te_lab[None] == 1), axis=1)  # (S,)
        mask = np.ones(te_tok.shape, bool)
        tok = np.broadcast_to(te_tok, (S,) + te_tok.shape)
        o = model.token_polarity(params)  # (S, V)
        contrib = fwd["w"] * np.take_along_axis(o, tok.reshape(S, -1), axis=1).reshape(tok.shape)  # w_i o_{t_i}
        w_tok = _per_token_mean(fwd["w"], te_tok, mask, V)  # (S, V)
        c_tok = _per_token_mean(contrib, te_tok, mask, V)
        s_tok = model.token_scores(params)  # (S, V)
        per_seed = []
        for k, seed in enumerate(seeds):
            row = {"seed": seed, "test_accuracy": float(acc[k]), "final_train_loss": float(out["history"][-1]["loss"][k])}
            for name, code in _GROUPS:
                sel = (groups == code) & np.isfinite(w_tok[k])
                row[f"score_{name}"] = float(np.mean(s_tok[k, sel])) if sel.any() else None
                row[f"weight_{name}"] = float(np.mean(w_tok[k, sel])) if sel.any() else None
                row[f"contribution_{name}"] = float(np.mean(c_tok[k, sel])) if sel.any() else None
            row["diverged_at_epoch"] = _first_non_finite_epoch(out["history"], k)
            row["pattern"] = ("diverged" if row["diverged_at_epoch"] is not None
                              else _pattern(row["weight_positive"], row["weight_negative"]))
            row["converged"] = bool(acc[k] >= converged) and row["diverged_at_epoch"] is None
            per_seed.append(row)
        conv = [r for r in per_seed if r["converged"]]
        keys = [f"{q}_{g}" for q in ("score", "weight", "contribution") for g, _ in _GROUPS]
        results[act] = {
            "per_seed": per_seed,
            "mean": {k: _finite_mean([r[k] for r in per_seed]) for k in keys + ["test_accuracy"]},
            "patterns": {p: sum(r["pattern"] == p for r in per_seed)
                         for p in ("opposite", "both positive", "both negative", "zero", "undefined", "diverged")},
            "diverged_seeds": [r["seed"] for r in per_seed if r["diverged_at_epoch"] is not None],
            "opposite_fraction": float(np.mean([r["pattern"] == "opposite" for r in per_seed])),
            "converged_seeds": len(conv),
            "contributions_signed_as_polarity": (float(np.mean([r["contribution_positive"] > 0 > r["contribution_negative"]
                                                                for r in conv])) if conv else None),
            "train_seconds": out["seconds"],
            "tokens_first_seed": {"score": s_tok[0].tolist(), "weight": np.nan_to_num(w_tok[0]).tolist(),
                                  "seen": np.isfinite(w_tok[0]).tolist()},
        }
        if on_result is not None:
            on_result(act, results[act])
    return {
        "settings": {"activations": list(activations), "seeds": list(seeds), "score": score, "epochs": epochs,
                     "batch_size": batch_size, "optimizer": optimizer, "lr": lr, "dropout": dropout,
                     "data": {"n_pos": config.n_pos, "n_neg": config.n_neg, "n_neutral": config.n_neutral,
                              "sentences": config.n_sentences, "train": int(len(tr_tok)), "test": int(len(te_tok))},
                     "groups_from": "gamma_e of TanhMax Eq. 11 on the training split",
                     "group_sizes": {name: int(np.sum(groups == code)) for name, code in _GROUPS}},
        "activations": results,
        "paper": PAPER_FIG2,
        "groups": groups.tolist(),
        "seconds": time.perf_counter() - t_start,
    }



def _num(value, spec):
    """``value`` formatted with ``spec``, or "n/a" (a diverged seed, an unseen group)."""
    return "n/a" if value is None or not np.isfinite(value) else format(value, spec)


def run(settings, *, progress=None, on_result=None):
    """:func:`run_polarity` with the settings of ``refattn polarity`` (TanhMax's small configuration of the data)."""
    return run_polarity(settings.activations, seeds=settings.seeds, score=settings.score, epochs=settings.epochs,
                        optimizer=settings.optimizer, lr=settings.lr, progress=progress,
                        checkpoint_dir=settings.checkpoint_dir, on_result=on_result, max_memory=settings.max_memory)


def report(result):
    """:func:`run_polarity`'s result: per activation the means, patterns and the paper's numbers."""
    lines = [f"synthetic polarity ({result['settings']['data']}), {len(result['settings']['seeds'])} seeds, "
             f"{result['settings']['epochs']} epochs, {result['settings']['optimizer']} lr "
             f"{result['settings']['lr']}; {result['seconds']:.1f} s", ""]
    for act, r in result["activations"].items():
        m = r["mean"]
        lines.append(f"{act}: test accuracy {_num(m['test_accuracy'], '.4f')}; patterns {r['patterns']}; "
                     f"opposite fraction {r['opposite_fraction']:.2f}; converged {r['converged_seeds']}; "
                     f"contributions signed as polarity {r['contributions_signed_as_polarity']}")
        if r["diverged_seeds"]:
            lines.append(f"    diverged (training loss not finite): seeds {r['diverged_seeds']}")
        for q in ("score", "weight", "contribution"):
            vals = "  ".join(f"{g} {_num(m[f'{q}_{g}'], '+.3f')}" for g, _ in _GROUPS)
            paper = result["paper"].get(act, {}).get(q)
            extra = ("   paper: " + "  ".join(f"{g} {v:+.2f}" for g, v in paper.items())) if paper else ""
            lines.append(f"    mean {q:<12} {vals}{extra}")
        for row in r["per_seed"]:
            div = f"  diverged at epoch {row['diverged_at_epoch']}" if row["diverged_at_epoch"] is not None else ""
            lines.append(f"    seed {row['seed']:>2}: acc {row['test_accuracy']:.3f}  "
                         f"w+ {_num(row['weight_positive'], '+.3f')}  w- {_num(row['weight_negative'], '+.3f')}  "
                         f"s+ {_num(row['score_positive'], '+.2f')}  s- {_num(row['score_negative'], '+.2f')}  "
                         f"c+ {_num(row['contribution_positive'], '+.3f')}  "
                         f"c- {_num(row['contribution_negative'], '+.3f')}  {row['pattern']}{div}")
    return "\n".join(lines)


def plot(result):
    """TanhMax Fig. 2 style: each token's score against its mean weight, coloured by its gamma_e group,
    one panel per activation (first seed); from :func:`run_polarity`."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    acts = list(result["activations"])
    groups = np.asarray(result["groups"])
    fig = Figure(figsize=(3.3 * len(acts), 3.2))
    axes = fig.subplots(1, len(acts), squeeze=False)
    codes = {"neutral": NEUTRAL, "positive": POSITIVE, "negative": NEGATIVE}
    for ax, act in zip(axes[0], acts):
        tok = result["activations"][act]["tokens_first_seed"]
        s, w, seen = np.asarray(tok["score"]), np.asarray(tok["weight"]), np.asarray(tok["seen"])
        for name in ("neutral", "positive", "negative"):
            sel = seen & (groups == codes[name])
            ax.scatter(s[sel], w[sel], s=6, color=GROUP_COLOURS[name], label=name, alpha=0.7)
        r = result["activations"][act]
        ax.set_title(f"{act}: seed {r['per_seed'][0]['seed']}, {r['per_seed'][0]['pattern']}", fontsize=9)
        ax.set_xlabel("token score")
    axes[0, 0].set_ylabel("mean attention weight")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig
