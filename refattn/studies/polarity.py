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

from ..plots import GROUP_COLOURS
from ..training.classifier import OPTIMISERS, classifier_fingerprint, classifier_memory, train_classifier
from ..training.runs import check_memory
from ..training.tasks.polarity import (
    NEGATIVE,
    NEUTRAL,
    POSITIVE,
    TANHMAX_SMALL,
    PolarityConfig,
    make_polarity,
    polarity_groups,
    token_polarity,
)
from ..training.train import check_resumable, checkpoint_paths
from ..custom import activation_label, activation_record
from . import StudySettings, activation_option, max_memory, model_activation, option

__all__ = ["PAPER_FIG2", "Settings", "memory_estimate", "run_polarity", "run", "report", "plot"]

#: The authors' public-code numbers for the TanhMax (self score) and softmax runs
#: (mean over tokens of each group).
PAPER_FIG2 = {
    "tanhmax": {"score": {"positive": 7.10, "negative": -8.70, "neutral": 0.63},
                "weight": {"positive": 0.48, "negative": -0.49, "neutral": 0.0}},
    "softmax": {"weight": {"positive": 0.48, "negative": 0.48}},
}

_GROUPS = (("positive", POSITIVE), ("negative", NEGATIVE), ("neutral", NEUTRAL))

#: The figure ``refattn polarity --out DIR`` writes.
FIGURE = "polarity_fig2.png"


@dataclass
class Settings(StudySettings):
    """TanhMax's synthetic polarity experiment (Fig. 2) over many seeds: scores, weights, logit contributions
    and sign patterns per group.

    ``config`` is the data (:class:`refattn.training.tasks.polarity.PolarityConfig`;
    TanhMax's small configuration by default), set from Python.
    """

    activations: tuple[str, ...] = activation_option(("softmax", "tanhmax", "signexp", "expressive"),
                                                     "comma-separated activations")
    seeds: int = option(10, "number of seeds", low=1)
    first_seed: int = option(0, "the first seed: the runs use seeds FIRST_SEED, FIRST_SEED + 1, ...", low=0)
    score: str = option("self", "score", choices=("self", "global", "additive"))
    epochs: int = option(20, "epochs", low=1)
    batch_size: int = option(100, "sentences per batch", low=1)
    optimizer: str = option("adam", "optimiser (adadelta-code: TanhMax's public code, Adadelta(0.05) on 100 x BCE)",
                            choices=tuple(OPTIMISERS))
    lr: float = option(1e-2, "learning rate", positive=True)
    dropout: float = option(0.5, "dropout rate of the classifier's hidden layer", low=0, high=0.99)
    converged: float = option(0.99, "test accuracy from which a seed counts as converged", low=0, high=1)
    checkpoint_dir: str | None = option(None, "folder for resumable checkpoints, one per activation",
                                        output="checkpoint_dir")
    max_memory: float | None = max_memory()
    config: PolarityConfig = option(TANHMAX_SMALL, "the synthetic data", cli=False)


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


def memory_estimate(seeds, config=TANHMAX_SMALL):
    """Bytes :func:`run_polarity` needs at its peak, estimated before any work: :func:`classifier_memory`
    of the data set (120,000 tokens for ``TANHMAX_SMALL``)."""
    return classifier_memory(seeds, 2 * config.n_per_class * (config.polar_per_sentence + config.neutral_per_sentence))


def run_polarity(settings, *, progress=None, on_result=None):
    """Train every activation over the seeds and read out what Fig. 2 shows, per seed (:class:`Settings`;
    ``derivations/12-score-dynamics-experiment.md``, section 4): per activation the :func:`_read_out`,
    beside the ``settings``, the ``paper``'s numbers and ``seconds``. ``on_result(activation, result)``
    is called as each activation finishes."""
    given = {activation_label(a): model_activation(a) for a in settings.activations}  # every one loaded first
    check_memory(memory_estimate(settings.seeds, settings.config), f"{settings.seeds} seeds", settings.max_memory)
    seeds = tuple(range(settings.first_seed, settings.first_seed + settings.seeds))
    checkpoints = checkpoint_paths(settings.checkpoint_dir, "polarity", given)  # checked before the first epoch
    t_start = time.perf_counter()
    data = make_polarity(settings.config)
    tr_tok, tr_lab = data.tokens[data.train_idx].astype(np.int64), data.labels[data.train_idx].astype(float)
    te_tok, te_lab = data.tokens[data.test_idx].astype(np.int64), data.labels[data.test_idx]
    pol = token_polarity(tr_tok, data.labels[data.train_idx], data.vocab_size)
    groups = polarity_groups(pol.gamma, pol.f_pos, pol.f_neg)
    run_of = dict(seeds=seeds, score=settings.score, epochs=settings.epochs, batch_size=settings.batch_size,
                  optimizer=settings.optimizer, lr=settings.lr, dropout=settings.dropout,
                  fingerprint_extra={"config": repr(settings.config)})
    for act in given:  # every checkpoint compared with its run before the first activation trains
        check_resumable(checkpoints[act], classifier_fingerprint(given[act], n=len(tr_tok), **run_of),
                        settings.epochs, "--checkpoint-dir")
    results = {}
    for act in given:
        model, params, out = train_classifier(tr_tok, tr_lab, data.vocab_size, given[act],
                                              checkpoint=checkpoints[act], progress=progress, **run_of)
        results[act] = _read_out(model, params, out, seeds, te_tok, te_lab, groups, settings.converged)
        if on_result is not None:
            on_result(act, results[act])
    c = settings.config
    return {
        "settings": {"activations": [activation_record(a) for a in given.values()], "seeds": list(seeds),
                     **{k: getattr(settings, k) for k in ("score", "epochs", "batch_size", "optimizer", "lr",
                                                          "dropout")},
                     "data": {"n_pos": c.n_pos, "n_neg": c.n_neg, "n_neutral": c.n_neutral,
                              "sentences": c.n_sentences, "train": int(len(tr_tok)), "test": int(len(te_tok))},
                     "groups_from": "gamma_e of TanhMax Eq. 11 on the training split",
                     "group_sizes": {name: int(np.sum(groups == code)) for name, code in _GROUPS}},
        "activations": results,
        "paper": PAPER_FIG2,
        "groups": groups.tolist(),
        "seconds": time.perf_counter() - t_start,
    }


def _read_out(model, params, out, seeds, te_tok, te_lab, groups, converged):
    """One trained activation on the test split: per seed the accuracy and each group's mean score, weight
    and logit contribution ``w o_e`` (TanhMax Eq. 11's groups), its sign pattern and whether it converged;
    their means, the patterns counted, ``opposite_fraction`` and ``contributions_signed_as_polarity``."""
    S, V = len(seeds), len(groups)
    tok = np.broadcast_to(te_tok, (S,) + te_tok.shape)
    fwd = model.outputs(params, {"tokens": tok})
    acc = np.mean((fwd["logit"] > 0) == (te_lab[None] == 1), axis=1)  # (S,)
    o = model.token_polarity(params)  # (S, V)
    contrib = fwd["w"] * np.take_along_axis(o, tok.reshape(S, -1), axis=1).reshape(tok.shape)  # w_i o_{t_i}
    mask = np.ones(te_tok.shape, bool)
    w_tok, c_tok = _per_token_mean(fwd["w"], te_tok, mask, V), _per_token_mean(contrib, te_tok, mask, V)  # (S, V)
    s_tok = model.token_scores(params)  # (S, V)
    per_seed = []
    for k, seed in enumerate(seeds):
        row = {"seed": seed, "test_accuracy": float(acc[k]), "final_train_loss": float(out["history"][-1]["loss"][k])}
        for name, code in _GROUPS:
            sel = (groups == code) & np.isfinite(w_tok[k])
            for q, values in (("score", s_tok), ("weight", w_tok), ("contribution", c_tok)):
                row[f"{q}_{name}"] = float(np.mean(values[k, sel])) if sel.any() else None
        row["diverged_at_epoch"] = _first_non_finite_epoch(out["history"], k)
        row["pattern"] = ("diverged" if row["diverged_at_epoch"] is not None
                          else _pattern(row["weight_positive"], row["weight_negative"]))
        row["converged"] = bool(acc[k] >= converged) and row["diverged_at_epoch"] is None
        per_seed.append(row)
    conv = [r for r in per_seed if r["converged"]]
    keys = [f"{q}_{g}" for q in ("score", "weight", "contribution") for g, _ in _GROUPS]
    return {
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


def _num(value, spec):
    """``value`` formatted with ``spec``, or "n/a" (a diverged seed, an unseen group)."""
    return "n/a" if value is None or not np.isfinite(value) else format(value, spec)


#: ``refattn polarity``.
run = run_polarity


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
