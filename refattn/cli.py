"""The ``refattn`` command line.

    refattn check          table of gradient errors for every activation and score
    refattn check --json   the same as one JSON object
    refattn check --activation FILE.py:NAME
                           the same checks for one user activation (refattn.define_activation)
    refattn prop1 [--json] Proposition 1 (TanhMax, Eq. 4) against autograd's exact velocity
    refattn properties [--json]
                           the four properties of TanhMax section 4, measured, beside its Table 3
    refattn nt-cycles --N 16 --tau 2 [--variant NT-S] [--json]
                           cycle structure of Expressive's NT tasks (its Eqs. 6-7)
    refattn dynamics [--json] [--out DIR]
                           Proposition 1 against gradient descent (measured vs predicted score velocity)
    refattn nt --task N2T5 --context 16 --attention expressive --seeds 16 --epochs E [--json]
                           Expressive's NT experiment (all seeds batched); --count-params prints the count
    refattn polarity [--json] [--out DIR]
                           TanhMax's synthetic polarity experiment (Fig. 2) over 10 seeds
    refattn interpret [--data synthetic|sst2] [--sst2 DIR] [--json] [--out DIR]
                           TanhMax Table 1: attention weights against gradient and leave-one-out importance
    refattn sst2 [--data DIR] [--json] [--out DIR]
                           TanhMax Table 2 (dev accuracy over seeds) and its Figure 1 on SST-2
    refattn nt-figure {fig3,fig4,fig6,fig7} [--json] [--out DIR]
                           Expressive's figures (N16T2 plateaus, N2T5, the mixture, NT-R), ours beside the paper's
    refattn nt-sensitivity {fig3,fig3-16,fig3-52,fig3-beta,fig4,fig5,fig5-256,fig5-512,fig6,fig7,fig7-128}
                           [--results FILE.json] [--json]
                           EA against DPA over initialisation scale x learning rate, 16 seeds per cell,
                           each finished cell saved (and resumed) in FILE.json
    refattn lm-study [--long-steps N] [--results FILE.json] [--json]
                           the toy LM with a tuned learning rate per variant and long runs, gaps to softmax
    refattn rank-collapse [--json] [--out DIR]
                           residual ratio against depth for every activation (TanhMax Fig. 4), two forms
    refattn neural-cost [--json] [--out DIR]
                           Neural Attention's score memory and time: concatenated, decomposed, chunked
    refattn lm [--data DIR|toy] [--json] [--out DIR]
                           toy character language model on SST-2 sentences, every activation (TanhMax
                           Table 4, NeuralAttn Table 1)
    refattn exercises [--json]
                           the exercises (statements in exercises/); 'exercises check NAME FILE.py'
                           grades an answer: exit 0 correct, 1 wrong, 2 bad input
"""

from __future__ import annotations

import argparse
import math
import os
import sys

__all__ = ["main"]


def _cmd_check(args) -> int:
    from .check import format_table, run_check  # noqa: PLC0415

    if args.activation is not None:  # one user activation: refattn/custom.py
        from .custom import run_check_file  # noqa: PLC0415

        result = run_check_file(args.activation, seed=args.seed)
    else:
        result = run_check(seed=args.seed)
    if args.json:
        print(_dumps(result))
    else:
        print(format_table(result))
    return 0 if result["ok"] else 1


def _cmd_exercises(args) -> int:
    from .exercises import command_from_args  # noqa: PLC0415

    return command_from_args(args)


def _cmd_prop1(args) -> int:
    from .theory.proposition1 import format_prop1_table, run_prop1  # noqa: PLC0415

    result = run_prop1(seed=args.seed)
    print(_dumps(result) if args.json else format_prop1_table(result))
    return 0 if result["ok"] else 1


def _cmd_properties(args) -> int:
    from .theory.properties import format_properties_table, run_properties  # noqa: PLC0415

    result = run_properties(seed=args.seed)
    print(_dumps(result) if args.json else format_properties_table(result))
    return 0  # a disagreement with the paper is a finding, reported in the output, not an error


def _cmd_nt_cycles(args) -> int:
    from .training.tasks.nt import format_nt_cycles, run_nt_cycles  # noqa: PLC0415

    result = run_nt_cycles(args.N, args.tau, args.variant)
    print(_dumps(result) if args.json else format_nt_cycles(result))
    return 0


def _dumps(result) -> str:
    """``result`` as strict JSON (:func:`refattn.training.runs.dumps`): a NaN or infinity becomes
    ``null``, listed under ``"non_finite"``, so every JSON parser reads the output."""
    from .training.runs import dumps  # noqa: PLC0415

    return dumps(result)


def _emit(args, result, fmt) -> int:
    """Save ``result`` in the results file (with ``--out``) and print it: JSON or ``fmt(result)``."""
    if getattr(args, "results", None) is not None:
        args.results.complete(result)
    print(_dumps(result) if args.json else fmt(result))
    return 0


def _on_result(args):
    """``on_result(key, piece)`` for a run: each finished piece into the results file (with ``--out``)."""
    results = getattr(args, "results", None)
    return None if results is None else results.add


def _check_environment():
    """The environment variables refattn reads, checked before any work (not at the first
    large call, deep in a run): ``REFATTN_NUM_THREADS`` and ``REFATTN_SMALL``."""
    value = os.environ.get("REFATTN_NUM_THREADS")
    if value is not None and not (value.strip().isdigit() and int(value) >= 1):
        raise ValueError(f"REFATTN_NUM_THREADS: expected a positive integer, got {value!r}")
    from .plots import small  # noqa: PLC0415

    small()  # raises for anything but unset, 0 or 1


def _open_results(args, argv):
    """With ``--out DIR``: create DIR and its results file ``DIR/<command>.json`` now, before
    any work, so an output folder that cannot be written is refused at once (one line)."""
    from .training.runs import ResultsFile  # noqa: PLC0415

    if args.out == "":
        raise ValueError("--out: expected a folder name, got an empty string")
    try:
        os.makedirs(args.out, exist_ok=True)
        return ResultsFile(os.path.join(args.out, f"{args.command}.json"), ["refattn"] + list(argv))
    except OSError as exc:
        raise ValueError(f"--out: cannot write into {args.out!r} ({exc.strerror or exc})") from None


def _write_figure(args, name, draw, result, key="figure"):
    """Draw a figure with ``draw()`` (a function returning it) into ``args.out/name`` and
    record the path in ``result[key]``. The results file gets ``result`` first; a figure
    that cannot be drawn or saved is a warning on stderr and ``result[key + "_error"]``,
    never the loss of the run's results."""
    import matplotlib  # noqa: PLC0415

    args.results.complete(result)  # the numbers are on disk before any drawing is tried
    matplotlib.use("Agg")
    path = os.path.join(args.out, name)
    try:
        draw().savefig(path, dpi=110, bbox_inches="tight")
    except (OSError, ValueError, RuntimeError) as exc:
        result[key + "_error"] = f"{type(exc).__name__}: {exc}"
        print(f"refattn: warning: figure {path} not written ({exc}); the results follow", file=sys.stderr)
        return
    result[key] = path


def _cmd_dynamics(args) -> int:
    from .studies.score_dynamics import format_dynamics, run_dynamics  # noqa: PLC0415

    summary, raw = run_dynamics(seed=args.seed, steps=args.steps, eta=args.eta, return_raw=True)
    if args.out:
        from .plots import plot_score_dynamics  # noqa: PLC0415

        _write_figure(args, "score_dynamics.png", lambda: plot_score_dynamics(raw), summary)
    return _emit(args, summary, format_dynamics)


def _cmd_nt(args) -> int:
    from .training.tasks.nt import parse_task  # noqa: PLC0415
    from .training.models.nt import count_params  # noqa: PLC0415

    _, N, _ = parse_task(args.task)
    if args.count_params:
        print(count_params(N, args.context))
        return 0
    from .studies.nt_training import format_nt, run_nt  # noqa: PLC0415

    result = run_nt(args.task, args.context, args.attention, seeds=args.seeds, epochs=args.epochs,
                    eval_every=args.eval_every, n_test=args.n_test, checkpoint=args.checkpoint,
                    progress=None if not args.json else False, layout=args.layout, init_scale=args.init_scale,
                    bias_init=args.bias_init, device=args.device, max_memory=args.max_memory, dtype=args.dtype,
                    lr_drop=None if args.lr_drop is None else (_whole(args.lr_drop[0], "--lr-drop EPOCH"),
                                                               args.lr_drop[1]))
    if args.out:
        from .plots import plot_nt_run  # noqa: PLC0415

        _write_figure(args, f"nt_{args.task}_{args.context}_{args.attention}_{args.layout}.png",
                      lambda: plot_nt_run(result), result)
    return _emit(args, result, format_nt)


def _cmd_polarity(args) -> int:
    from .studies.polarity import format_polarity, run_polarity  # noqa: PLC0415

    result = run_polarity(_names(args.activations, "--activations"), seeds=args.seeds, score=args.score,
                          epochs=args.epochs, optimizer=args.optimizer, lr=args.lr,
                          progress=None if not args.json else False, checkpoint_dir=args.checkpoint_dir,
                          on_result=_on_result(args), max_memory=args.max_memory)
    if args.out:
        from .plots import plot_polarity  # noqa: PLC0415

        _write_figure(args, "polarity_fig2.png", lambda: plot_polarity(result), result)
    return _emit(args, result, format_polarity)


def _cmd_interpret(args) -> int:
    from .studies.interpret import format_interpret, run_interpret  # noqa: PLC0415

    result = run_interpret(_names(args.activations, "--activations"), args.data, sst2_path=args.sst2,
                           seeds=args.seeds,
                           epochs=args.epochs, n_instances=args.n_instances, seed=args.seed, n_draws=args.draws,
                           split=args.split, progress=None if not args.json else False,
                           on_result=_on_result(args))
    if args.out:
        from .plots import plot_interpret  # noqa: PLC0415

        _write_figure(args, f"interpret_{args.data}.png", lambda: plot_interpret(result), result)
    return _emit(args, result, format_interpret)


def _cmd_sst2(args) -> int:
    from .studies.sst2 import format_sst2, run_sst2  # noqa: PLC0415

    result = run_sst2(args.data, activations=_names(args.activations, "--activations"), seeds=args.seeds,
                      epochs=args.epochs, figure_seed=args.figure_seed, checkpoint_dir=args.checkpoint_dir,
                      out=args.out, progress=None if not args.json else False, on_result=_on_result(args))
    return _emit(args, result, format_sst2)


def _output_args(parser, figure=None):
    """The options every command shares: ``--json``, and ``--out DIR`` where it draws ``figure``."""
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    if figure is not None:
        parser.add_argument("--out", help=f"folder to write {figure} into")


def _memory_arg(parser):
    parser.add_argument("--max-memory", type=float, metavar="GIB",
                        help="GiB the run may use (default: the memory available now); a run estimated "
                             "to need more is refused before any work")


def _csv(text):
    return tuple(x for x in text.split(",") if x)


def _whole(value, option):
    """A float that is a whole number, as an int, or a clear error naming the option."""
    if not float(value).is_integer():
        raise ValueError(f"{option}: expected a whole number, got {value:g}")
    return int(value)


def _names(text, option):
    """Comma-separated names, checked before any work: none empty, none twice."""
    names = tuple(x.strip() for x in text.split(","))
    if not names or any(not x for x in names):
        raise ValueError(f"{option}: expected comma-separated names with none empty, got {text!r}")
    twice = sorted({x for x in names if names.count(x) > 1})
    if twice:
        raise ValueError(f"{option}: {twice[0]!r} is given twice in {text!r}")
    return names


def _ints(text, option):
    """Comma-separated integers, or a clear error naming the option."""
    try:
        return tuple(int(x) for x in _csv(text))
    except ValueError:
        raise ValueError(f"{option}: expected comma-separated integers, got {text!r}") from None


def _floats(text, option):
    """A comma-separated list of numbers, e.g. ``"0.5,1,2"``; one line naming ``option`` otherwise."""
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"{option}: expected comma-separated numbers such as 0.5,1,2, got {text!r}") from None
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"{option}: expected numbers > 0, got {text!r}")
    return values


def _command_line(args):
    """The command as typed (without ``--json``), for a results file's record of what made it."""
    return " ".join(["refattn"] + [a for a in (sys.argv[1:] if args.argv is None else args.argv) if a != "--json"])


def _cmd_nt_sensitivity(args) -> int:
    from .studies.nt_sensitivity import GRID, format_sensitivity, run_sensitivity  # noqa: PLC0415

    result = run_sensitivity(args.figure, seeds=args.seeds, epochs=args.epochs,
                             eval_every=args.eval_every,
                             init_scales=_floats(args.init_scales, "--init-scales") if args.init_scales
                             else GRID["init_scale"],
                             lrs=_floats(args.lrs, "--lrs") if args.lrs else GRID["lr"], n_test=args.n_test,
                             dtype=args.dtype, results=args.results_file, command=_command_line(args),
                             progress=None if not args.json else False)
    return _emit(args, result, format_sensitivity)


def _cmd_nt_figure(args) -> int:
    from .studies.nt_figures import format_nt_figure, plot_nt_figure, run_nt_figure  # noqa: PLC0415

    options = {k: v for k, v in (("seeds", args.seeds), ("epochs", args.epochs)) if v is not None}
    if args.lr is not None:
        options["lr"] = args.lr
    result = run_nt_figure(args.figure, progress=None if not args.json else False, device=args.device, **options)
    if args.out:
        _write_figure(args, f"nt_{args.figure}.png", lambda: plot_nt_figure(result), result, key="figure_file")
    return _emit(args, result, format_nt_figure)


def _cmd_rank_collapse(args) -> int:
    from .studies.rank_collapse import format_rank_collapse, plot_rank_collapse, run_rank_collapse  # noqa: PLC0415

    names = None if args.activations is None else _names(args.activations, "--activations")
    result = run_rank_collapse(names, depth=args.depth,
                               n=args.n, d=args.d, heads=args.heads, seeds=args.seeds, inputs=args.inputs,
                               architectures=_csv(args.architectures), seed=args.seed, rescale=args.rescale,
                               progress=None if not args.json else False, on_result=_on_result(args))
    if args.out:
        _write_figure(args, "rank_collapse.png", lambda: plot_rank_collapse(result), result)
    return _emit(args, result, format_rank_collapse)


def _cmd_neural_cost(args) -> int:
    from .studies.neural_cost import format_neural_cost, plot_neural_cost, run_neural_cost  # noqa: PLC0415

    result = run_neural_cost(_ints(args.ns, "--ns"), _ints(args.d_primes, "--d-primes"), batch=args.batch, heads=args.heads,
                             hidden=args.hidden, chunk=args.chunk, budget_mib=_ints(args.budget_mib, "--budget-mib"),
                             repeats=args.repeats, seed=args.seed, progress=None if not args.json else False)
    if args.out:
        _write_figure(args, "neural_cost.png", lambda: plot_neural_cost(result), result)
    return _emit(args, result, format_neural_cost)


def _cmd_lm(args) -> int:
    from .studies.lm import format_lm, plot_lm, run_lm  # noqa: PLC0415

    result = run_lm(_names(args.activations, "--activations"), data=args.data, seeds=args.seeds, steps=args.steps,
                    layers=args.layers,
                    width=args.width, level=args.level, lr=args.lr, checkpoint_dir=args.checkpoint_dir,
                    progress=None if not args.json else False, on_result=_on_result(args),
                    max_memory=args.max_memory)
    if args.out:
        _write_figure(args, "lm.png", lambda: plot_lm(result), result)
    return _emit(args, result, format_lm)


def _cmd_lm_study(args) -> int:
    from .studies.lm_study import format_lm_study, run_lm_study  # noqa: PLC0415

    result = run_lm_study(data=args.data, long_steps=args.long_steps, long_evals=args.long_evals,
                          phases=_names(args.phases, "--phases"), results=args.results_file,
                          command=_command_line(args), progress=None if not args.json else False)
    return _emit(args, result, format_lm_study)


def build_parser() -> argparse.ArgumentParser:
    from .training.models.nt import DEFAULT_LAYOUT, LAYOUTS  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="refattn",
        description="refattn: attention beyond softmax, with hand-derived gradients checked three ways.",
    )
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error instead of one line")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="check every hand-derived gradient against autograd and "
                                     "central differences (float64)")
    _output_args(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the random check points (default 0)")
    p.add_argument("--activation", metavar="FILE.py:NAME",
                   help="check only the activation NAME defined in FILE.py: an Activation (e.g. from "
                        "refattn.define_activation) or a dict with keys 'g', 'h' (optionally 'dg', 'dh')")
    p.set_defaults(func=_cmd_check)
    p = sub.add_parser("prop1", help="Proposition 1 (TanhMax, Eq. 4) for every activation: error against "
                                     "the exact gradient-flow velocity, and the cross terms under shared "
                                     "projections")
    _output_args(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the random model and batch (default 0)")
    p.set_defaults(func=_cmd_prop1)
    p = sub.add_parser("properties", help="the four properties of TanhMax section 4 (monotonicity, "
                                          "log-nonlinearity, contextual normalisation, origin symmetry), "
                                          "measured for every activation, beside the paper's Table 3")
    _output_args(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the random rows (default 0)")
    p.set_defaults(func=_cmd_properties)
    p = sub.add_parser("nt-cycles", help="cycle lengths and counts of Expressive's NT, NT-S and NT-R tasks, "
                                         "and the mean cycle length")
    p.add_argument("--N", type=int, required=True, help="the basis N (number of symbols)")
    p.add_argument("--tau", type=int, required=True, help="the delay tau")
    p.add_argument("--variant", default="NT", choices=["NT", "NT-S", "NT-R"], help="the task (default NT)")
    _output_args(p)
    p.set_defaults(func=_cmd_nt_cycles)
    p = sub.add_parser("dynamics", help="Proposition 1 against gradient descent on synthetic polarity data: "
                                        "measured score change per step vs the predicted velocity")
    _output_args(p, "score_dynamics.png")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the initialisation (default 0)")
    p.add_argument("--steps", type=int, default=400, help="gradient steps of the trajectories (default 400)")
    p.add_argument("--eta", type=float, default=0.5, help="step size of the trajectories (default 0.5)")
    p.set_defaults(func=_cmd_dynamics)
    p = sub.add_parser("nt", help="train Expressive's one-bilayer transformer on an NT task, all seeds batched")
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
    p.add_argument("--lr-drop", type=float, nargs=2, metavar=("EPOCH", "FACTOR"),
                   help="divide the learning rate by FACTOR from EPOCH on (Expressive's mixture run)")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"], help="NumPy on the CPU or CuPy on the GPU")
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"],
                   help="precision of the parameters and activations (default float64; float32 about 2x faster)")
    p.add_argument("--count-params", action="store_true", help="print only the parameter count")
    _output_args(p, "nt_<task>_<context>_<attention>_<layout>.png")
    _memory_arg(p)
    p.set_defaults(func=_cmd_nt)
    p = sub.add_parser("polarity", help="TanhMax's synthetic polarity experiment (Fig. 2) over many seeds: "
                                         "scores, weights, logit contributions and sign patterns per group")
    p.add_argument("--activations", default="softmax,tanhmax,signexp,expressive",
                   help="comma-separated activations (default softmax,tanhmax,signexp,expressive)")
    p.add_argument("--seeds", type=int, default=10, help="number of seeds (default 10)")
    p.add_argument("--score", default="self", choices=["self", "global", "additive"], help="score (default self)")
    p.add_argument("--epochs", type=int, default=20, help="epochs (default 20)")
    p.add_argument("--optimizer", default="adam", choices=["adam", "adadelta", "adadelta-code", "adagrad", "sgd"],
                   help="optimiser (default adam; adadelta-code: TanhMax's public code, Adadelta(0.05) on 100 x BCE)")
    p.add_argument("--lr", type=float, default=1e-2, help="learning rate (default 0.01)")
    p.add_argument("--checkpoint-dir", help="folder for resumable checkpoints, one per activation")
    _output_args(p, "polarity_fig2.png")
    _memory_arg(p)
    p.set_defaults(func=_cmd_polarity)
    p = sub.add_parser("interpret", help="TanhMax Table 1: Kendall tau of attention weights against gradient "
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
    _output_args(p, "interpret_<data>.png")
    p.set_defaults(func=_cmd_interpret)
    p = sub.add_parser("sst2", help="TanhMax's classifier on SST-2: dev accuracy over seeds beside its Table 2, "
                                     "and its Figure 1 (sentences coloured by signed attention weight)")
    p.add_argument("--data", help="SST-2 folder with train.tsv and dev.tsv (default $REFATTN_SST2, "
                                  "else ../shared/data/sst2); never downloaded")
    p.add_argument("--activations", default="softmax,tanhmax", help="comma-separated (default softmax,tanhmax)")
    p.add_argument("--seeds", type=int, default=3, help="number of seeds (default 3)")
    p.add_argument("--epochs", type=int, default=1, help="epochs (default 1)")
    p.add_argument("--figure-seed", type=int, default=None, help="the seed whose weights Figure 1 shows")
    p.add_argument("--checkpoint-dir", help="folder for resumable checkpoints, one per activation")
    _output_args(p, "sst2_fig1.png")
    p.set_defaults(func=_cmd_sst2)
    from .studies.lm import DEFAULTS as LM, VARIANTS  # noqa: PLC0415
    from .studies.nt_figures import FIGURES  # noqa: PLC0415

    p = sub.add_parser("nt-figure", help="Expressive's figures, short runs, ours beside the paper's numbers")
    p.add_argument("figure", choices=FIGURES, help="fig3 (N16T2), fig4 (N2T5), fig6 (mixture), fig7 (NT-R)")
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (default: the figure's)")
    p.add_argument("--epochs", type=int, default=None, help="epochs of every run (default: the figure's)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default Expressive's 0.02)")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"], help="NumPy on the CPU or CuPy on the GPU")
    _output_args(p, "nt_<figure>.png")
    p.set_defaults(func=_cmd_nt_figure)
    from .studies.nt_sensitivity import SETTINGS as SENSITIVITY  # noqa: PLC0415

    p = sub.add_parser("nt-sensitivity", help="EA against DPA over initialisation scale x learning rate "
                                              "(Expressive Figs. 3-7), each finished cell saved and resumed")
    p.add_argument("figure", choices=tuple(SENSITIVITY), help="the figure's task and length "
                                                             "(refattn.studies.nt_sensitivity.SETTINGS)")
    p.add_argument("--seeds", type=int, default=16, help="seeds per cell (default 16)")
    p.add_argument("--epochs", type=int, default=None, help="epochs (default: the figure's)")
    p.add_argument("--eval-every", type=int, default=None, help="epochs between evaluations (default: the figure's)")
    p.add_argument("--init-scales", default=None, help="comma-separated (default 0.5,1,2)")
    p.add_argument("--lrs", default=None, help="comma-separated learning rates (default 0.02,0.32)")
    p.add_argument("--n-test", type=int, default=100, help="test series per seed (default 100)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"], help="default float32")
    p.add_argument("--results", dest="results_file", default=None,
                   help="JSON file written after every cell and resumed if it exists")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.set_defaults(func=_cmd_nt_sensitivity)
    p = sub.add_parser("rank-collapse", help="residual ratio against depth for every activation, pure attention, "
                                             "with skips and with feed-forward layers (TanhMax Fig. 4)")
    p.add_argument("--activations", default=None, help="comma-separated (default: every registered activation)")
    p.add_argument("--architectures", default="pure,skip,ffn", help="comma-separated (default pure,skip,ffn)")
    p.add_argument("--depth", type=int, default=12, help="layers (default 12)")
    p.add_argument("--n", type=int, default=8, help="tokens (default 8)")
    p.add_argument("--d", type=int, default=16, help="model width (default 16)")
    p.add_argument("--heads", type=int, default=2, help="heads (default 2)")
    p.add_argument("--seeds", type=int, default=2, help="weight draws (default 2)")
    p.add_argument("--inputs", type=int, default=2, help="inputs per weight draw (default 2)")
    p.add_argument("--rescale", action="store_true", help="rescale the tokens to a fixed norm after every layer")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    _output_args(p, "rank_collapse.png")
    p.set_defaults(func=_cmd_rank_collapse)
    p = sub.add_parser("neural-cost", help="Neural Attention's score memory and time, concatenated vs decomposed "
                                           "vs chunked, as ratios to dot-product scores (NeuralAttn Tables 6-8)")
    p.add_argument("--ns", default="128,256,512,785,1024", help="sequence lengths (default 128,256,512,785,1024)")
    p.add_argument("--d-primes", default="2,16,64", help="projected widths d' (default 2,16,64)")
    p.add_argument("--batch", type=int, default=1, help="batch (default 1)")
    p.add_argument("--heads", type=int, default=1, help="heads (default 1)")
    p.add_argument("--hidden", type=int, default=16, help="hidden units of the score MLP (default 16)")
    p.add_argument("--chunk", type=int, default=64, help="query rows per chunk (default 64)")
    p.add_argument("--budget-mib", default="256,1024", help="memory budgets for the longest n (default 256,1024)")
    p.add_argument("--repeats", type=int, default=3, help="timing repeats, best taken (default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    _output_args(p, "neural_cost.png")
    p.set_defaults(func=_cmd_neural_cost)
    p = sub.add_parser("lm", help="toy character language model on SST-2 sentences: every activation, the Cog "
                                  "hybrid and Neural Attention in layer 0, same budget, seeds batched")
    p.add_argument("--data", default=None, help="SST-2 folder (default $REFATTN_SST2, else ../shared/data/sst2), "
                                                "or 'toy' for generated sentences")
    p.add_argument("--activations", default=",".join(VARIANTS), help=f"comma-separated (default {','.join(VARIANTS)})")
    p.add_argument("--seeds", type=int, default=LM["seeds"], help=f"seeds (default {LM['seeds']})")
    p.add_argument("--steps", type=int, default=LM["steps"], help=f"Adam steps (default {LM['steps']})")
    p.add_argument("--layers", type=int, default=LM["layers"], help=f"layers (default {LM['layers']})")
    p.add_argument("--width", type=int, default=LM["width"], help=f"model width (default {LM['width']})")
    p.add_argument("--level", default=LM["level"], choices=["char", "word"], help="tokens (default char)")
    p.add_argument("--lr", type=float, default=LM["lr"], help=f"Adam learning rate (default {LM['lr']})")
    p.add_argument("--checkpoint-dir", help="folder for resumable checkpoints, one per variant")
    _output_args(p, "lm.png")
    _memory_arg(p)
    p.set_defaults(func=_cmd_lm)
    p = sub.add_parser("lm-study", help="the toy LM's verdicts: the table, the learning rate tuned per variant "
                                        "(same budget), long runs with the gap to softmax against steps; "
                                        "each finished run saved and resumed")
    p.add_argument("--data", default=None, help="SST-2 folder (default $REFATTN_SST2, else ../shared/data/sst2), "
                                                "or 'toy' for generated sentences")
    p.add_argument("--long-steps", type=int, default=1200, help="length of the long runs (default 1200)")
    p.add_argument("--long-evals", type=int, default=12, help="evaluations along a long run (default 12)")
    p.add_argument("--phases", default="table,tune,long,control",
                   help="comma-separated (default table,tune,long,control)")
    p.add_argument("--results", dest="results_file", default=None,
                   help="JSON file written after every run and resumed if it exists")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.set_defaults(func=_cmd_lm_study)
    from .exercises import add_arguments as exercise_arguments  # noqa: PLC0415

    p = sub.add_parser("exercises", help="list the exercises (statements in exercises/), or grade an answer "
                                         "with 'exercises check NAME FILE.py' (exit 0 correct, 1 wrong)")
    exercise_arguments(p)
    p.set_defaults(func=_cmd_exercises)
    return parser


def main(argv=None) -> int:
    """Run one command. Bad input from the library (``ValueError``, ``TypeError``,
    ``OSError``, and ``MemoryError`` for a run estimated too large) becomes one line on
    stderr and exit code 2 (``--debug`` shows the traceback); a closed output pipe
    (``refattn ... | head``) ends quietly. With ``--out DIR`` the results go to
    ``DIR/<command>.json`` as they are produced (:class:`refattn.training.runs.ResultsFile`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        _check_environment()
        from .fast.memory import retain_freed_memory  # noqa: PLC0415

        retain_freed_memory()  # a command is its own process: keep freed memory for the next epoch's arrays
        args.results = None
        if getattr(args, "out", None) is not None:
            args.results = _open_results(args, sys.argv[1:] if argv is None else argv)
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at interpreter exit
        return code
    except (ValueError, TypeError, OSError, MemoryError) as exc:
        if args.debug or isinstance(exc, BrokenPipeError):
            if isinstance(exc, BrokenPipeError):
                return _quiet_broken_pipe()
            raise
        where = f" {exc.filename}:" if isinstance(exc, OSError) and exc.filename else ""
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"refattn {args.command}: error:{where} {message}", file=sys.stderr)
        return 2


def _quiet_broken_pipe() -> int:
    """The reader of stdout went away: send what is left to /dev/null and stop quietly."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
