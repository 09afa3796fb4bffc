"""The ``refattn`` command line: ``refattn check``, ``refattn exercises`` and one command per study of
:data:`refattn.studies.STUDIES`, whose options are the fields of its ``Settings`` (:func:`add_settings`,
plain :mod:`argparse`). docs/cli.md says what is checked before any work, what a run keeps on disk, and
how every way a command can end is answered in one line (:func:`main`).
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import dataclasses
import functools
import inspect
import math
import os
import signal
import sys
import typing

__all__ = ["main", "build_parser", "add_settings", "settings_from_args"]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and a pointer to ``--help`` (exit 2), not the usage.

    A value that starts with ``-`` after an option of :data:`NEGATIVE_VALUES` is that option's value
    (``--range -20,20``), not an unknown option."""

    #: Options whose value may begin with a minus sign.
    NEGATIVE_VALUES = ("--range",)

    def parse_known_args(self, args=None, namespace=None):
        if args is not None:
            args, out = list(args), []
            for i, a in enumerate(args):
                if out and out[-1] in self.NEGATIVE_VALUES and a.startswith("-") and a[1:2].isdigit():
                    out[-1] = f"{out[-1]}={a}"
                else:
                    out.append(a)
            args = out
        return super().parse_known_args(args, namespace)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# --------------------------------------------------------------------------
# A study's options, from its Settings dataclass (docs/cli.md)
# --------------------------------------------------------------------------


def _shown(value):
    """A default as the command line writes it: ``0.5,1,2`` for a tuple, ``0.02`` for a float."""
    if isinstance(value, tuple):
        return ",".join(_shown(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _help(f):
    text = f.metadata.get("help", "")
    if f.default not in (dataclasses.MISSING, None, False):
        text += f" (default {_shown(f.default)})"
    return text.replace("%", "%%")  # argparse formats help with %


def _comma_list(kind):
    """An argparse type: ``0.5,1,2`` as a tuple of ``kind``."""
    words = {int: "integers", float: "numbers such as 0.5,1,2", str: "names"}[kind]

    def parse(text):
        try:
            return tuple(kind(x.strip()) for x in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {words}, got {text!r}") from None
    return parse


class _Deprecated(argparse.Action):
    """An old spelling of an option: its value goes where the new one's does, with a one-line note on stderr."""

    def __init__(self, option_strings, dest, new="", **kwargs):
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        _say(f"{parser.prog}: note: {option_string} is deprecated; use {self.new}")
        setattr(namespace, self.dest, values)


def add_settings(parser, cls):
    """One argument per field of the settings dataclass ``cls`` (:func:`refattn.studies.command_fields`)."""
    from .studies import command_fields, field_type, option_name  # noqa: PLC0415

    hints = typing.get_type_hints(cls)
    for f in command_fields(cls):
        tp, meta, name = field_type(hints[f.name])[0], f.metadata, option_name(f)
        kwargs = {"help": _help(f), **{k: meta[k] for k in ("choices", "metavar") if k in meta}}
        kinds = typing.get_args(tp) if typing.get_origin(tp) is tuple else ()
        if tp is bool:
            kwargs["action"] = "store_true"
        elif kinds and kinds[-1] is Ellipsis:
            kwargs["type"] = _comma_list(kinds[0])
        elif kinds:  # a fixed-length tuple: that many values, each converted by its kind
            kwargs.update(nargs=len(kinds), type=float if float in kinds else kinds[0])
        else:
            kwargs["type"] = tp
        if meta.get("positional"):
            parser.add_argument(f.name, **kwargs)
        else:
            parser.add_argument(name, dest=f.name, **({"required": True} if f.default is dataclasses.MISSING
                                                       else {"default": f.default}), **kwargs)
        for old in meta.get("old_names", ()):
            hidden = {k: v for k, v in kwargs.items() if k not in ("help", "action")}
            parser.add_argument(old, dest=f.name, action=_Deprecated, new=name, help=argparse.SUPPRESS,
                                default=argparse.SUPPRESS, **hidden)


def _value(kind, value):
    """A parsed argument as the field's value: a fixed-length tuple's whole numbers as ``int``."""
    kinds = typing.get_args(kind) if typing.get_origin(kind) is tuple else ()
    if not isinstance(value, list):
        return value
    return tuple(int(v) if k is int and float(v).is_integer() else v for v, k in zip(value, kinds))


def settings_from_args(cls, args, files=None):
    """The ``cls`` instance the parsed arguments describe (checked as it is made), with every file the
    command reads or writes distinct (``files(settings)`` lists them) and every output claimed."""
    from .studies import command_fields, field_type  # noqa: PLC0415
    from .training.runs import check_distinct  # noqa: PLC0415

    hints = typing.get_type_hints(cls)
    try:
        settings = cls(**{f.name: _value(field_type(hints[f.name])[0], getattr(args, f.name))
                          for f in command_fields(cls)})
    except (ValueError, TypeError) as exc:
        raise _naming_option(exc, cls) from None
    if files is not None:
        check_distinct(files(settings))
    _claim_outputs(settings)
    return settings


def _claim_outputs(settings):
    """Every output path writable and locked for this run, before any work (the files last: nothing is
    locked for settings refused before)."""
    from .studies import check_folder, command_fields, option_name  # noqa: PLC0415
    from .training.runs import check_results_path  # noqa: PLC0415
    from .training.train import check_checkpoint  # noqa: PLC0415

    check = {"checkpoint": check_checkpoint, "checkpoint_dir": check_folder, "results": check_results_path}
    for f in command_fields(type(settings)):
        if "output" in f.metadata and getattr(settings, f.name) is not None:
            check[f.metadata["output"]](getattr(settings, f.name), option_name(f))


# --------------------------------------------------------------------------
# Running a study
# --------------------------------------------------------------------------


def _dumps(result) -> str:
    """``result`` as strict JSON (:func:`refattn.training.runs.dumps`): a NaN or infinity becomes
    ``null``, listed under ``"non_finite"``, so every JSON parser reads the output."""
    from .training.runs import dumps  # noqa: PLC0415

    return dumps(result)


def _files(module, command, out, settings):
    """``[(option, path), ...]``: every file a study's command reads (a field with ``input="file"``) or
    writes (its results file, its checkpoint, and ``--out``'s results file and figure), for
    :func:`refattn.training.runs.check_distinct` and the working-folder check."""
    from .studies import command_fields, option_name  # noqa: PLC0415

    named = []
    for f in command_fields(type(settings)):
        value, option = getattr(settings, f.name), option_name(f)
        if not isinstance(value, str) or not value.strip():
            continue  # no file given (an empty name is refused with the option's other rules)
        if f.metadata.get("output") in ("results", "checkpoint") or f.metadata.get("input") == "file":
            named.append((option, value))
    if out is not None and out.strip():
        named += [("--out", os.path.join(out, f"{command}.json")), ("--out", _figure_path(module, settings, out))]
    _check_working_folder(named)
    return named


def _figure_path(module, settings, out):
    from .studies import figure_fields  # noqa: PLC0415

    return os.path.join(out, module.FIGURE.format(**figure_fields(settings)))  # an activation by its name


def _check_working_folder(named):
    """A relative path in a working folder that was removed: one line naming the option (not a bare
    "No such file or directory" from deep in the run)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        for option, path in named:
            if not os.path.isabs(path):
                raise ValueError(f"{option}: {path!r} is relative to the working folder, which no longer exists "
                                 f"(it was removed); give an absolute path, or change to a folder that exists") from None


def _open_results(out, command, argv, figure):
    """``--out DIR``: made, locked for this run and its results file ``DIR/<command>.json`` opened before any
    work (:class:`refattn.training.runs.ResultsFile`; docs/cli.md, "Results that survive a failure")."""
    from .studies import check_folder  # noqa: PLC0415
    from .training.runs import ResultsFile, check_writable, claim  # noqa: PLC0415

    if not out.strip():
        raise ValueError(f"--out: expected a folder name, got {out!r}")
    check_folder(out, "--out")
    claim(out, "--out", folder=True)
    check_writable(figure, "--out")
    path = os.path.join(out, f"{command}.json")
    if os.path.exists(path + ".lock"):  # a grid's --results was (or is) this file: "in use", not "not a
        claim(path, "--out")             # results file"; no lock file is made where there was none
    _refuse_a_grids_file(path)
    try:
        return ResultsFile(path, ["refattn"] + list(argv), option="--out")
    except OSError as exc:
        raise ValueError(f"--out: cannot write into {out!r} ({exc.strerror or exc})") from None


def _refuse_a_grids_file(path):
    """``path`` (``--out``'s results file) is not a grid's results file (``--results``): that one is resumed
    or reported by ``--results``, and never replaced by ``--out``."""
    import json  # noqa: PLC0415

    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return  # missing, or not JSON: ResultsFile says what it is
    if isinstance(doc, dict) and isinstance(doc.get("settings"), dict) and isinstance(doc.get("cells"), dict):
        raise ValueError(f"--out: {path!r} is the results file of a grid ({len(doc['cells'])} cells, written by "
                         f"--results), which --out would replace; it is left as it is: give --results {path} to "
                         f"resume or report it, or another --out folder")


def _write_figure(module, settings, result, out, results):
    """``module.plot(result)`` written into ``out`` (atomically) after the numbers, its path in the result
    (``"figure"``, or ``"figure_file"`` where the result has a ``"figure"``); one that cannot be drawn or
    saved is a warning and ``result[key + "_error"]``."""
    import matplotlib  # noqa: PLC0415

    from .training.runs import atomic_write  # noqa: PLC0415

    results.complete(result)  # the numbers are on disk before any drawing is tried
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    key = "figure_file" if "figure" in result else "figure"
    path = _figure_path(module, settings, out)
    try:
        fig = module.plot(result)
        try:
            if os.path.isdir(path):
                raise IsADirectoryError(21, "Is a directory", path)
            atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=110, bbox_inches="tight"))
        finally:
            plt.close(fig)
    except (OSError, ValueError, RuntimeError) as exc:
        result[key + "_error"] = f"{type(exc).__name__}: {exc}"
        _say(f"refattn: warning: figure {path} not written ({exc}); the results follow")
        return
    result[key] = path


def _run_study(command, args, argv) -> int:
    """Run the study of ``command`` with the parsed arguments (:func:`settings_from_args`, before any work);
    print its report or its JSON, the JSON where the report fails (:func:`_report`)."""
    from .studies import study  # noqa: PLC0415

    module = study(command)
    out = getattr(args, "out", None)
    settings = settings_from_args(module.Settings, args, files=functools.partial(_files, module, command, out))
    results = None if out is None else _open_results(out, command, argv, _figure_path(module, settings, out))
    context = {"progress": False if args.json else None,
               "on_result": None if results is None else results.add,
               # the command as typed, less --json: what a results file records and a rerun repeats
               "command": " ".join(["refattn"] + [a for a in argv if a != "--json"])}
    wanted = inspect.signature(module.run).parameters
    try:
        result = module.run(settings, **{k: v for k, v in context.items() if k in wanted})
    except (ValueError, TypeError) as exc:
        raise _naming_option(exc, module.Settings) from None
    if out is not None:
        _write_figure(module, settings, result, out, results)
        results.complete(result)
    _print(_dumps(result) if args.json else _report(command, module, result))
    return module.status(result) if hasattr(module, "status") else 0


def _naming_option(exc, cls):
    """``exc`` with a leading settings field's name (``checkpoint: ...``, as the library names its
    arguments) spelt as the command line's option (``--checkpoint: ...``)."""
    from .studies import command_fields, option_name  # noqa: PLC0415

    head, sep, rest = str(exc).partition(": ")
    name, _, item = head.partition(" ")  # "lr_drop EPOCH": one value of a fixed-length tuple
    fields = {f.name: f for f in command_fields(cls)}
    if not sep or name not in fields:
        return exc
    return (ValueError if isinstance(exc, ValueError) else TypeError)(
        f"{' '.join(filter(None, (option_name(fields[name]), item)))}: {rest}")


def _report(command, module, result):
    """The study's text report; where it fails (a bug in refattn), a warning and the results as JSON,
    so that a run's work is never lost to its report."""
    try:
        return module.report(result)
    except Exception as exc:  # noqa: BLE001 - the work is done: print it whatever the report does
        _say(f"refattn {command}: warning: the text report failed ({type(exc).__name__}: {_first_line(exc)}; a bug "
             f"in refattn); the results follow as JSON")
        return _dumps(result)


def _check(args, argv) -> int:
    """``refattn check``: every built-in, or ``--activation FILE.py[:NAME]`` with its options. Exit 0 when
    every check passes, 1 when one fails (a wrong derivative too), 2 for a file, name or option that
    cannot be used; with ``--json`` a JSON object is printed in every case (``{"ok": false, "error"}``
    for the last)."""
    from .check import check_options, format_activation, format_table, run_check, run_check_file  # noqa: PLC0415

    try:
        check_range, plot = check_options(args)
        if args.activation is None:
            result, text = run_check(seed=args.seed), format_table
        else:  # activations of your own: refattn/custom.py
            result = run_check_file(args.activation, seed=args.seed, check_range=check_range, dtype=args.dtype)
            text = format_activation
            if plot is not None:
                _plot_check(result, plot)
    except ValueError as exc:
        if args.json:  # a script reads the same kind of object whatever happened
            _print(_dumps({"ok": False, "error": _first_line(exc), "activation": args.activation}))
        raise
    _print(_dumps(result) if args.json else text(result))
    return 0 if result["ok"] else 1


def _plot_check(result, folder):
    """``refattn check --plot DIR``: each checked activation's weights and gradient beside softmax's,
    ``DIR/check_<NAME>.png``, written whole or not at all; the path goes into the result."""
    import matplotlib  # noqa: PLC0415

    from .check import plot_activation  # noqa: PLC0415
    from .custom import load_activation  # noqa: PLC0415
    from .studies import check_folder  # noqa: PLC0415
    from .training.runs import atomic_write  # noqa: PLC0415

    matplotlib.use("Agg")
    check_folder(folder, "--plot")
    for r in result.get("activations", [result]):
        if r.get("file") is None or r.get("refused") or r.get("errors"):
            continue  # nothing that can be drawn
        act = load_activation(f"{r['file']}:{r['activation']}")
        fig = plot_activation(act, check_range=r["range"], seed=r["seed"])
        path = os.path.join(folder, f"check_{r['activation']}.png")
        atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=100, bbox_inches="tight"))
        r["plot"] = path


def _exercises(args, argv) -> int:
    from .exercises import command_from_args  # noqa: PLC0415

    return command_from_args(args)


def _summary(cls):
    """The first paragraph of a settings docstring, on one line: the command's help."""
    return " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split()).rstrip(".")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``refattn``: ``check``, ``exercises`` and one subcommand per study."""
    from .exercises import add_arguments as exercise_arguments  # noqa: PLC0415
    from .studies import STUDIES, study  # noqa: PLC0415

    parser = _Parser(prog="refattn",
                     description="refattn: attention beyond softmax, with hand-derived gradients checked three "
                                 "ways; the papers' studies, each one command.")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error instead of one line")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("check", help="Check every hand-derived gradient against autograd and "
                                     "central differences (float64)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--seed", type=int, default=0, help="seed of the random check points (default 0)")
    p.add_argument("--activation", metavar="FILE.py[:NAME]",
                   help="check only the activation NAME defined in FILE.py (an Activation, e.g. from "
                        "refattn.define_activation, an Activation subclass, or a dict with keys 'g', 'h'), or "
                        "every activation FILE.py defines, one by one")
    p.add_argument("--range", metavar="LO,HI", help="with --activation: compare derivatives and draw scores over "
                                                    "[LO, HI] (default: the activation's, [-10, 10])")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="with --activation: float32 also checks the float32 weights and VJP against float64, "
                        "within float32's rounding (default float64)")
    p.add_argument("--plot", metavar="DIR", help="with --activation: draw its weights and gradient beside "
                                                 "softmax's into DIR/check_<NAME>.png")
    p.set_defaults(func=_check)
    for command in STUDIES:
        module = study(command)
        text = _summary(module.Settings)
        p = sub.add_parser(command, help=text, description=text)
        add_settings(p, module.Settings)
        p.add_argument("--json", action="store_true", help="print the results as one JSON object")
        if hasattr(module, "plot"):
            figure = module.FIGURE.replace("{", "<").replace("}", ">")
            p.add_argument("--out", metavar="DIR",
                           help=f"folder to write {figure} and the results file {command}.json into")
        p.set_defaults(func=functools.partial(_run_study, command))
    p = sub.add_parser("exercises", help="List the exercises (statements in exercises/), or grade an answer "
                                         "with 'exercises check NAME FILE.py' (exit 0 correct, 1 wrong)")
    exercise_arguments(p)
    p.set_defaults(func=_exercises)
    return parser


def _check_environment():
    """The environment variables refattn reads, checked before any work (not at the first
    large call, deep in a run): ``REFATTN_NUM_THREADS`` and ``REFATTN_SMALL``."""
    value = os.environ.get("REFATTN_NUM_THREADS")
    if value is not None and not (value.strip().isdigit() and int(value) >= 1):
        raise ValueError(f"REFATTN_NUM_THREADS: expected a positive integer, got {value!r}")
    from .plots import small  # noqa: PLC0415

    small()  # raises for anything but unset, 0 or 1


class _Signalled(KeyboardInterrupt):
    """SIGTERM or SIGHUP, answered as Ctrl-C (:func:`main`): the run's ``finally`` blocks release its
    locks and remove its temporaries, and one line says what was kept."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: The signals a user (``kill``, a closed terminal, a batch system's time limit) sends besides Ctrl-C.
STOP_SIGNALS = ("SIGTERM", "SIGHUP")


@contextlib.contextmanager
def _handled(names, handler, keep_ignored=False):
    """Within this block the signals ``names`` go to ``handler``, their handlers restored after; with
    ``keep_ignored`` a signal ignored when refattn started (``nohup`` ignores SIGHUP) stays ignored.
    Only the main thread can set handlers: elsewhere nothing changes."""
    old = {}
    for name in names:
        sig = getattr(signal, name, None)  # None: not a POSIX system
        try:
            if sig is not None and not (keep_ignored and signal.getsignal(sig) is signal.SIG_IGN):
                old[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread
            pass
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def _signals_as_interrupt():
    """SIGTERM and SIGHUP raise :class:`_Signalled`, as Ctrl-C raises ``KeyboardInterrupt``."""

    def stop(signum, frame):
        raise _Signalled(signum)

    return _handled(STOP_SIGNALS, stop, keep_ignored=True)


def _signals_ignored():
    """No signal of Ctrl-C's kind interrupts the one line that answers the first."""
    return _handled(("SIGINT",) + STOP_SIGNALS, signal.SIG_IGN)


#: ASCII for the characters refattn's reports use, where the output cannot encode them (an ``ascii`` or
#: ``latin-1`` terminal, ``PYTHONIOENCODING=ascii``); any other becomes a backslash escape.
ASCII_SPELLINGS = {"\u00b1": "+/-", "\u2713": "+", "\u2014": "-", "\u2013": "-", "\u0394": "D", "\u00d7": "x",
                   "\u2212": "-", "\u2264": "<=", "\u2265": ">=", "\u2248": "~", "\u2192": "->", "\u2026": "...",
                   "\u00b7": "."}


def _spell_in_ascii(exc):
    """A codec error handler: a character the output cannot encode, spelt as :data:`ASCII_SPELLINGS` says."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start:exc.end]
    return "".join(ASCII_SPELLINGS.get(c) or c.encode("ascii", "backslashreplace").decode("ascii")
                   for c in text), exc.end


codecs.register_error("refattn-ascii", _spell_in_ascii)


@contextlib.contextmanager
def _encodable_streams():
    """stdout and stderr spell what their encoding cannot hold in ASCII (:data:`ASCII_SPELLINGS`), so that
    a report is never lost to an encoding error after the work; each is restored after."""
    old = []
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="refattn-ascii")
            except (ValueError, OSError, AttributeError):
                continue
            old.append(stream)
    try:
        yield
    finally:
        for stream in old:
            with contextlib.suppress(ValueError, OSError, AttributeError):
                stream.reconfigure(errors="strict")


def main(argv=None) -> int:
    """Run one command; bad input, a signal, a closed stream or a bug each end in one line on stderr and
    an exit code (docs/cli.md, "Bad input" and "Interrupting a run"), never a traceback."""
    argv = sys.argv[1:] if argv is None else list(argv)
    state = {"command": None, "claimed": []}
    with _signals_as_interrupt(), _encodable_streams():
        try:
            return _main(argv, state)
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", signal.SIGINT)
            how = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
            with _signals_ignored():  # a second Ctrl-C or kill while we report changes nothing
                try:
                    line = _interrupted(state, argv, how)
                except BaseException:  # noqa: BLE001 - the report of an interruption must not fail in turn
                    line = f"refattn {state['command'] or ''}: {how}".replace(" :", ":")
                _say(line)
            return 128 + int(signum)
        except BrokenPipeError:
            return _quiet_streams()


def _main(argv, state) -> int:
    try:
        parser = build_parser()
    except Exception as exc:  # noqa: BLE001 - a broken install: one line, not a traceback
        if "--debug" in argv:
            raise
        _say(f"refattn: internal error: {type(exc).__name__}: {_first_line(exc)} (a bug in refattn; rerun with "
             f"--debug for the traceback)")
        return 1
    args = parser.parse_args(argv)
    state["command"] = args.command
    if sys.stdout is None:  # started with stdout closed (``>&-``): the output could go nowhere, so do no work
        _say(f"refattn {args.command}: error: stdout: closed (redirect it to /dev/null to discard the output)")
        return 2
    from .training.runs import session  # noqa: PLC0415

    try:
        with session() as claimed:
            state["claimed"] = claimed
            _check_environment()
            from .fast.memory import retain_freed_memory  # noqa: PLC0415
            from .fast.threads import single_threaded_blas  # noqa: PLC0415

            retain_freed_memory()  # a command is its own process: keep freed memory for the next epoch's arrays
            with single_threaded_blas():  # the same numbers under any OPENBLAS_NUM_THREADS (docs/cli.md)
                code = args.func(args, argv)
            if sys.stdout is not None:
                sys.stdout.flush()  # a closed pipe shows here, inside the try, not at interpreter exit
            return code
    except (BrokenPipeError, KeyboardInterrupt):
        raise
    except (ValueError, TypeError, OSError, MemoryError) as exc:
        if args.debug:
            raise
        tail = ""
        if isinstance(exc, OSError) and not getattr(exc, "_refattn_stdout", False):  # a full disk mid-run, say
            with contextlib.suppress(Exception):  # (every write is atomic: what is on disk is whole)
                tail = _kept(state, argv, only_if_kept=True).replace("; to resume,", "; to go on,")
        _say(f"refattn {args.command}: error:{_where(exc)} {_first_line(exc)}{tail}")
        return 2
    except Exception as exc:  # noqa: BLE001 - no traceback reaches a user; --debug shows it
        if args.debug:
            raise
        _say(f"refattn {args.command}: internal error: {type(exc).__name__}: {_first_line(exc)} (a bug in "
             f"refattn; rerun with --debug for the traceback)")
        return 1


def _first_line(exc):
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _where(exc):
    """`` FILE:`` for an ``OSError`` that names its file (``stdout`` for the output itself)."""
    if not isinstance(exc, OSError):
        return ""
    if exc.filename is not None:
        return f" {os.fspath(exc.filename)}:"
    return " stdout:" if getattr(exc, "_refattn_stdout", False) else ""


def _print(text):
    """Print the command's output; an error writing it (a full disk behind stdout) names stdout."""
    if sys.stdout is None:  # unreachable from main(), which refuses a closed stdout before any work
        return
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        exc._refattn_stdout = True
        raise


def _say(line):
    """One line on stderr; nothing where stderr is closed or broken (never onto stdout)."""
    if sys.stderr is None:
        return
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _interrupted(state, argv, how="interrupted"):
    """The one line Ctrl-C (or a signal answered as it) prints: what the run kept on disk, and how to go on."""
    command = state["command"]
    prog = f"refattn {command}" if command else "refattn"
    return f"{prog}: {how}" + _kept(state, argv)


def _kept(state, argv, *, only_if_kept=False):
    """What follows a run's last line (an interruption, a disk that filled): ``"; kept FILE (3 finished
    runs); to resume, run the same command again: ..."``, or that nothing was saved; with
    ``only_if_kept``, empty where no file was kept."""
    import shlex  # noqa: PLC0415

    command = state["command"]
    kept = []
    if state["claimed"]:  # then refattn.training.runs is loaded: it claimed them
        from .training.runs import held_paths  # noqa: PLC0415

        kept = [(option, path) for option, path in held_paths(state["claimed"]) if os.path.exists(path)
                and (option != "--out" or os.path.isdir(path))]  # --out's file is told of with its folder
    if only_if_kept and not kept:
        return ""
    rerun = shlex.join(["refattn", *argv])
    resumable = [p for o, p in kept if o != "--out"]
    if not kept and state["claimed"]:  # outputs given, but nothing had finished to be written to them
        from .training.runs import held_paths  # noqa: PLC0415

        named = ", ".join(path for _, path in held_paths(state["claimed"]))
        return f" before anything was saved to {named}; run the same command again to start: {rerun}"
    if not kept:
        return f"; nothing was saved{_resume_hint(command)}"
    names = [_describe(option, path, command) for option, path in kept]
    shown = "; ".join(names[:4]) + (f"; and {len(names) - 4} more" if len(names) > 4 else "")
    if resumable:
        return f"; kept {shown}; to resume, run the same command again: {rerun}"
    return f"; kept {shown}{_resume_hint(command)}"


def _describe(option, path, command):
    """``run.npz (through epoch 12)``, ``out/nt.json (2 finished pieces)``: one kept file, briefly."""
    import json  # noqa: PLC0415

    try:
        if option == "--out":
            with open(os.path.join(path, f"{command}.json"), encoding="utf-8") as fh:
                doc = json.load(fh)
            done = "complete" if doc.get("complete") else f"{len(doc.get('finished', {}))} finished pieces"
            return f"{os.path.join(path, command + '.json')} ({done})"
        if path.endswith(".npz"):
            import numpy as np  # noqa: PLC0415

            with np.load(path, allow_pickle=False) as data:
                epoch = json.loads(str(data["meta"]))["epoch"]
            return f"{path} ({epoch + 1} epochs trained)"
        with open(path, encoding="utf-8") as fh:
            return f"{path} ({len(json.load(fh).get('cells', {}))} finished runs)"
    except Exception:  # noqa: BLE001 - a description is a courtesy: the name alone will do
        return path


def _resume_hint(command):
    """`` (--checkpoint FILE.npz makes a run resumable)``, for a study that has such an option."""
    if command is None:
        return ""
    from .studies import STUDIES, option_name  # noqa: PLC0415  (the standard library only)

    module = sys.modules.get(f"{__package__}.studies.{STUDIES.get(command)}")
    if module is None:  # interrupted before the study was loaded: no new import now
        return ""
    outputs = [f for f in dataclasses.fields(module.Settings) if "output" in f.metadata]
    if not outputs:
        return ""
    metavar = {"checkpoint": "FILE.npz", "checkpoint_dir": "DIR", "results": "FILE.json"}
    f = outputs[0]
    return f" ({option_name(f)} {metavar[f.metadata['output']]} makes a run resumable)"


def _quiet_streams() -> int:
    """The reader of stdout went away: send what is left to /dev/null and stop quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, AttributeError, ValueError):
        pass
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
