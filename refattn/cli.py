"""The ``refattn`` command line.

    refattn check          table of gradient errors for every activation and score
    refattn check --json   the same as one JSON object
    refattn prop1 [--json] Proposition 1 (seed 001, Eq. 4) against autograd's exact velocity
    refattn properties [--json]
                           the four properties of seed 001 section 4, measured, beside its Table 3
    refattn nt-cycles --N 16 --tau 2 [--variant NT-S] [--json]
                           cycle structure of seed 004's NT tasks (its Eqs. 6-7)
    refattn dynamics [--json] [--out DIR]
                           Proposition 1 against gradient descent (measured vs predicted score velocity)
    refattn nt --task N2T5 --context 16 --attention expressive --seeds 16 --epochs E [--json]
                           seed 004's NT experiment (all seeds batched); --count-params prints the count
    refattn polarity [--json] [--out DIR]
                           seed 001's synthetic polarity experiment (Fig. 2) over 10 seeds
    refattn interpret [--data synthetic|sst2] [--sst2 DIR] [--json] [--out DIR]
                           seed 001 Table 1: attention weights against gradient and leave-one-out importance
    refattn sst2 [--data DIR] [--json] [--out DIR]
                           seed 001 Table 2 (dev accuracy over seeds) and its Figure 1 on SST-2
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["main"]


def _cmd_check(args) -> int:
    from .check import format_table, run_check  # noqa: PLC0415

    result = run_check(seed=args.seed)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_table(result))
    return 0 if result["ok"] else 1


def _cmd_prop1(args) -> int:
    from .dynamics import format_prop1_table, run_prop1  # noqa: PLC0415

    result = run_prop1(seed=args.seed)
    print(json.dumps(result, indent=2) if args.json else format_prop1_table(result))
    return 0 if result["ok"] else 1


def _cmd_properties(args) -> int:
    from .properties import format_properties_table, run_properties  # noqa: PLC0415

    result = run_properties(seed=args.seed)
    print(json.dumps(result, indent=2) if args.json else format_properties_table(result))
    return 0  # a disagreement with the paper is a finding, reported in the output, not an error


def _cmd_nt_cycles(args) -> int:
    from .tasks.nt import format_nt_cycles, run_nt_cycles  # noqa: PLC0415

    result = run_nt_cycles(args.N, args.tau, args.variant)
    print(json.dumps(result, indent=2) if args.json else format_nt_cycles(result))
    return 0


def _write_figure(folder, name, draw, result):
    """Draw a figure with ``draw()`` (a function returning it) into ``folder/name``
    and record the path in ``result["figure"]``."""
    import os  # noqa: PLC0415

    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    draw().savefig(path, dpi=110, bbox_inches="tight")
    result["figure"] = path


def _cmd_dynamics(args) -> int:
    from .experiments.score_dynamics import format_dynamics, run_dynamics  # noqa: PLC0415

    summary, raw = run_dynamics(seed=args.seed, steps=args.steps, eta=args.eta, return_raw=True)
    if args.out:
        from .plots import plot_score_dynamics  # noqa: PLC0415

        _write_figure(args.out, "score_dynamics.png", lambda: plot_score_dynamics(raw), summary)
    print(json.dumps(summary, indent=2) if args.json else format_dynamics(summary))
    return 0


def _cmd_nt(args) -> int:
    from .tasks.nt import parse_task  # noqa: PLC0415
    from .models.nt import count_params  # noqa: PLC0415

    _, N, _ = parse_task(args.task)
    if args.count_params:
        print(count_params(N, args.context))
        return 0
    from .experiments.nt_training import format_nt, run_nt  # noqa: PLC0415

    result = run_nt(args.task, args.context, args.attention, seeds=args.seeds, epochs=args.epochs,
                    eval_every=args.eval_every, n_test=args.n_test, checkpoint=args.checkpoint,
                    progress=None if not args.json else False, layout=args.layout, init_scale=args.init_scale,
                    bias_init=args.bias_init)
    if args.out:
        from .plots import plot_nt_run  # noqa: PLC0415

        _write_figure(args.out, f"nt_{args.task}_{args.context}_{args.attention}_{args.layout}.png",
                      lambda: plot_nt_run(result), result)
    print(json.dumps(result, indent=2) if args.json else format_nt(result))
    return 0


def _cmd_polarity(args) -> int:
    from .experiments.polarity import format_polarity, run_polarity  # noqa: PLC0415

    result = run_polarity(tuple(args.activations.split(",")), seeds=args.seeds, score=args.score,
                          epochs=args.epochs, optimizer=args.optimizer, lr=args.lr,
                          progress=None if not args.json else False, checkpoint_dir=args.checkpoint_dir)
    if args.out:
        from .plots import plot_polarity  # noqa: PLC0415

        _write_figure(args.out, "polarity_fig2.png", lambda: plot_polarity(result), result)
    print(json.dumps(result, indent=2) if args.json else format_polarity(result))
    return 0


def _cmd_interpret(args) -> int:
    from .experiments.interpret import format_interpret, run_interpret  # noqa: PLC0415

    result = run_interpret(tuple(args.activations.split(",")), args.data, sst2_path=args.sst2, seeds=args.seeds,
                           epochs=args.epochs, n_instances=args.n_instances, seed=args.seed, n_draws=args.draws,
                           split=args.split, progress=None if not args.json else False)
    if args.out:
        from .plots import plot_interpret  # noqa: PLC0415

        _write_figure(args.out, f"interpret_{args.data}.png", lambda: plot_interpret(result), result)
    print(json.dumps(result, indent=2) if args.json else format_interpret(result))
    return 0


def _cmd_sst2(args) -> int:
    from .experiments.sst2 import format_sst2, run_sst2  # noqa: PLC0415

    result = run_sst2(args.data, activations=tuple(args.activations.split(",")), seeds=args.seeds,
                      epochs=args.epochs, figure_seed=args.figure_seed, checkpoint_dir=args.checkpoint_dir,
                      out=args.out, progress=None if not args.json else False)
    print(json.dumps(result, indent=2) if args.json else format_sst2(result))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .models.nt import DEFAULT_LAYOUT, LAYOUTS  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="refattn",
        description="refattn: attention beyond softmax, with hand-derived gradients checked three ways.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="check every hand-derived gradient against autograd and "
                                     "central differences (float64)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--seed", type=int, default=0, help="seed of the random check points (default 0)")
    p.set_defaults(func=_cmd_check)
    p = sub.add_parser("prop1", help="Proposition 1 (seed 001, Eq. 4) for every activation: error against "
                                     "the exact gradient-flow velocity, and the cross terms under shared "
                                     "projections")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--seed", type=int, default=0, help="seed of the random model and batch (default 0)")
    p.set_defaults(func=_cmd_prop1)
    p = sub.add_parser("properties", help="the four properties of seed 001 section 4 (monotonicity, "
                                          "log-nonlinearity, contextual normalisation, origin symmetry), "
                                          "measured for every activation, beside the paper's Table 3")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--seed", type=int, default=0, help="seed of the random rows (default 0)")
    p.set_defaults(func=_cmd_properties)
    p = sub.add_parser("nt-cycles", help="cycle lengths and counts of seed 004's NT, NT-S and NT-R tasks, "
                                         "and the mean cycle length")
    p.add_argument("--N", type=int, required=True, help="the basis N (number of symbols)")
    p.add_argument("--tau", type=int, required=True, help="the delay tau")
    p.add_argument("--variant", default="NT", choices=["NT", "NT-S", "NT-R"], help="the task (default NT)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.set_defaults(func=_cmd_nt_cycles)
    p = sub.add_parser("dynamics", help="Proposition 1 against gradient descent on synthetic polarity data: "
                                        "measured score change per step vs the predicted velocity")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--out", help="folder to write the figure score_dynamics.png into")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the initialisation (default 0)")
    p.add_argument("--steps", type=int, default=400, help="gradient steps of the trajectories (default 400)")
    p.add_argument("--eta", type=float, default=0.5, help="step size of the trajectories (default 0.5)")
    p.set_defaults(func=_cmd_dynamics)
    p = sub.add_parser("nt", help="train seed 004's one-bilayer transformer on an NT task, all seeds batched")
    p.add_argument("--task", default="N2T5", help="task name, e.g. N2T5, N16T2, N16T2-S (default N2T5)")
    p.add_argument("--context", type=int, default=16, help="context length N_con (default 16)")
    p.add_argument("--attention", default="expressive",
                   help="a registered activation: softmax (DPA, Eq. 1) or expressive (EA, Eq. 2), ...")
    p.add_argument("--seeds", type=int, default=16, help="number of independent runs (default 16)")
    p.add_argument("--epochs", type=int, default=200, help="epochs (default 200)")
    p.add_argument("--eval-every", type=int, default=10, help="evaluate every this many epochs (default 10)")
    p.add_argument("--n-test", type=int, default=100, help="test series per evaluation (default 100)")
    p.add_argument("--checkpoint", help="a .npz file to resume from and save to")
    p.add_argument("--layout", default=DEFAULT_LAYOUT, choices=list(LAYOUTS),
                   help=f"where the two bias vectors sit (default {DEFAULT_LAYOUT}; derivation 11, section 7)")
    p.add_argument("--init-scale", type=float, default=1.0,
                   help="multiplies the half-width of the uniform initialisation (default 1: 1/sqrt(fan_in))")
    p.add_argument("--bias-init", default="zeros", choices=["zeros", "uniform"], help="bias initialisation")
    p.add_argument("--count-params", action="store_true", help="print only the parameter count")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--out", help="folder to write the accuracy figure into")
    p.set_defaults(func=_cmd_nt)
    p = sub.add_parser("polarity", help="seed 001's synthetic polarity experiment (Fig. 2) over many seeds: "
                                         "scores, weights, logit contributions and sign patterns per group")
    p.add_argument("--activations", default="softmax,tanhmax,signexp,expressive",
                   help="comma-separated activations (default softmax,tanhmax,signexp,expressive)")
    p.add_argument("--seeds", type=int, default=10, help="number of seeds (default 10)")
    p.add_argument("--score", default="self", choices=["self", "global", "additive"], help="score (default self)")
    p.add_argument("--epochs", type=int, default=20, help="epochs (default 20)")
    p.add_argument("--optimizer", default="adam", choices=["adam", "adadelta", "adagrad", "sgd"])
    p.add_argument("--lr", type=float, default=1e-2, help="learning rate (default 0.01)")
    p.add_argument("--checkpoint-dir", help="folder for resumable checkpoints, one per activation")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--out", help="folder to write polarity_fig2.png into")
    p.set_defaults(func=_cmd_polarity)
    p = sub.add_parser("interpret", help="seed 001 Table 1: Kendall tau of attention weights against gradient "
                                          "and leave-one-out importance, permutation and random-weight tests")
    p.add_argument("--data", default="synthetic", choices=["synthetic", "sst2"], help="data (default synthetic)")
    p.add_argument("--sst2", help="SST-2 folder (default $REFATTN_SST2, else ../shared/data/sst2)")
    p.add_argument("--activations", default="softmax,tanhmax", help="comma-separated (default softmax,tanhmax)")
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (default: 3 synthetic, 1 SST-2)")
    p.add_argument("--epochs", type=int, default=None, help="epochs (default: 8 synthetic, 2 SST-2)")
    p.add_argument("--n-instances", type=int, default=None, help="test instances measured (default: 300 synthetic, all 872 SST-2 dev)")
    p.add_argument("--draws", type=int, default=100, help="random permutations / weights per instance (default 100)")
    p.add_argument("--split", default="label", choices=["label", "prediction"],
                   help="group instances by true label (default) or by predicted class")
    p.add_argument("--seed", type=int, default=0, help="seed of the data (default 0)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--out", help="folder to write interpret_<data>.png into")
    p.set_defaults(func=_cmd_interpret)
    p = sub.add_parser("sst2", help="seed 001's classifier on SST-2: dev accuracy over seeds beside its Table 2, "
                                     "and its Figure 1 (sentences coloured by signed attention weight)")
    p.add_argument("--data", help="SST-2 folder with train.tsv and dev.tsv (default $REFATTN_SST2, "
                                  "else ../shared/data/sst2); never downloaded")
    p.add_argument("--activations", default="softmax,tanhmax", help="comma-separated (default softmax,tanhmax)")
    p.add_argument("--seeds", type=int, default=3, help="number of seeds (default 3)")
    p.add_argument("--epochs", type=int, default=1, help="epochs (default 1)")
    p.add_argument("--figure-seed", type=int, default=None, help="the seed whose weights Figure 1 shows")
    p.add_argument("--checkpoint-dir", help="folder for resumable checkpoints, one per activation")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--out", help="folder to write sst2_fig1.png into")
    p.set_defaults(func=_cmd_sst2)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
