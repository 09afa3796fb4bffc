"""The papers' experiments: one module per study, each run the same way.

Every module here defines

* ``Settings``: a dataclass of the study's settings, each field with its
  default and its help text written once (:func:`option`); the first line of
  its docstring says what the study does. Every parameter of the study is a
  field, written there and nowhere else: the study's runner (``run_nt``,
  ``run_polarity``, ...) takes the settings object itself;
* ``run(settings, ...)``: the study, returning a JSON-able dict. Besides
  ``settings`` it takes whichever of these keywords it uses: ``progress``
  (``None``: a progress line on a terminal; ``False``: silent), ``on_result``
  (called as ``on_result(key, piece)`` as each piece finishes, so a results
  file keeps it) and ``command`` (the command line, recorded in a results file
  that a rerun resumes);
* ``report(result) -> str``: the result as text;
* where the study has a figure, ``plot(result)`` returning a matplotlib
  ``Figure`` and ``FIGURE``, the PNG's name (a format string over the
  settings' fields, such as ``"nt_{figure}.png"``);
* optionally ``status(result) -> int``, the command's exit code (0 when absent).

:data:`STUDIES` lists them by command name; ``refattn <command>`` builds its
options from ``Settings`` (``refattn.cli``), so a default cannot differ
between the command line and the code. From Python::

    from refattn.studies import polarity
    result = polarity.run(polarity.Settings(seeds=3, epochs=4))
    print(polarity.report(result))

Beside the studies, two modules hold what several studies use (:data:`SHARED`):
:mod:`refattn.studies.helpers` (the data folder, the code's commit, phrase
lists) and :mod:`refattn.studies.statistics` (the rank test). A study takes
from another study only its ``run_*`` function, its constants and its
``Settings``.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
import types
import typing

__all__ = ["STUDIES", "SHARED", "study", "option", "activation_option", "resolve_activation", "model_activation",
           "activation_label",
           "activation_record", "figure_fields", "max_memory", "option_name", "command_fields", "field_type",
           "check_settings", "check_folder", "check_device", "RANGE_RULES"]

#: Command name -> module of :mod:`refattn.studies`, in the order ``refattn --help`` lists them
#: (the theory's numbers, TanhMax's experiments, Expressive's, NeuralAttn's and the language model).
STUDIES = {
    "prop1": "prop1",
    "properties": "four_properties",
    "prop2": "prop2",
    "signexp-at-zero": "signexp_zero",
    "dynamics": "score_dynamics",
    "polarity": "polarity",
    "interpret": "interpret",
    "sst2": "sst2",
    "sst2-sweep": "sst2_sweep",
    "rank-collapse": "rank_collapse",
    "geometry": "geometry",
    "nt-cycles": "nt_cycles",
    "nt": "nt_training",
    "nt-figure": "nt_figures",
    "nt-sensitivity": "nt_sensitivity",
    "curves": "curves",
    "neural-surface": "neural_surface",
    "neural-cost": "neural_cost",
    "lm": "lm",
    "lm-study": "lm_study",
}

#: The modules of :mod:`refattn.studies` that are not studies: what several studies share.
SHARED = ("helpers", "statistics", "grid")


def study(command):
    """The module of the study that ``refattn <command>`` runs (imported now)."""
    if command not in STUDIES:
        raise ValueError(f"command: expected one of {tuple(STUDIES)}, got {command!r}")
    return importlib.import_module(f"{__name__}.{STUDIES[command]}")


def option(default=dataclasses.MISSING, help="", **cli):  # noqa: A002  (the word the command line uses)
    """A field of a study's ``Settings``: its default, its help and its rules, written once.

    Parameters
    ----------
    default : object, optional
        The default; none makes the setting required (a positional argument
        with ``positional=True``). A tuple default is immutable, so it is safe
        to share.
    help : str
        One line for ``--help``; the command line appends ``(default ...)``
        unless the default is None or False, so a None default's help says
        what None means.
    **cli
        What the command line needs beyond the field's type: ``choices``,
        ``metavar``, ``positional=True``; and the rules :func:`check_settings`
        applies before any work: ``low=`` and ``high=`` (a number, or every
        number of a list, at least / at most this), ``positive=True`` (> 0),
        ``items=`` (for a fixed-length tuple, one such dict of rules per value),
        ``one_of=`` (a name, or every name of a list, among these; unlike
        ``choices`` the help does not list them), ``check=`` (a function of
        the value that raises ``ValueError`` for a bad one),
        ``output=`` (``"checkpoint"``, a ``.npz`` file; ``"checkpoint_dir"``,
        a folder of them; ``"results"``, a results file: each writable, locked
        for this run, an existing one readable) and ``device=True`` (``"gpu"``
        needs CuPy and a CUDA device); ``cli=False`` for a setting that Python
        callers give and the command line leaves at its default (a structure
        no option can spell, or a hook for tests); ``old_names=("--attention",)``
        for spellings of the option that the command line still accepts, each
        with a one-line deprecation note on stderr.
    """
    return dataclasses.field(default=default, metadata={"help": help, **cli})


#: What an activation option says about the values it takes (appended to its help).
ACTIVATION_HELP = "a built-in name, or FILE.py:NAME for an activation of yours (docs/verify.md)"


def activation_option(default=dataclasses.MISSING, help="", *, also=(), **cli):  # noqa: A002
    """A setting that names an activation (a ``str`` field) or several (a ``tuple[str, ...]`` field).

    Each value is a registered activation's name, ``FILE.py:NAME`` (an
    activation defined in a file, :func:`refattn.custom.load_activation`: it
    goes wherever a built-in goes, and results files record its file's SHA-256),
    one of the names in ``also`` (a study's own variants, such as the language
    model's ``cog-hybrid``) or, from Python, an
    :class:`~refattn.core.activations.Activation` itself. Checked before any work
    by :func:`check_settings` (a file that cannot be loaded, a name that is not
    there, a definition that failed its checks: one line naming the option);
    read by :func:`resolve_activation`, :func:`activation_label` and
    :func:`activation_record`.
    """
    return option(default, f"{help} ({ACTIVATION_HELP})", activation=tuple(also), **cli)


def resolve_activation(value, option="activation", training=False):
    """The :class:`~refattn.core.activations.Activation` an activation setting names: a registered
    name's, ``FILE.py:NAME``'s (loaded once per process and content), or the object itself. With
    ``training``, as a model trains with it (:func:`refattn.custom.divergence_as_data`: a value
    that is not finite is NaN, a diverging seed is data)."""
    from ..core.activations import Activation, activation  # noqa: PLC0415
    from ..custom import divergence_as_data, is_spec, load_activation  # noqa: PLC0415

    if isinstance(value, Activation):
        if getattr(value, "refused", None) is not None:
            raise ValueError(f"{option}: activation {value.name!r} was refused when it was defined: {value.refused}")
        act = value
    elif is_spec(value):
        act = load_activation(value, option)
    elif isinstance(value, str):
        act = activation(value)  # ValueError naming the registered ones
    else:
        raise ValueError(f"{option}: expected an activation's name, FILE.py:NAME or an Activation, got {value!r}")
    return divergence_as_data(act) if training else act


def model_activation(value, option="activations"):
    """What a model of :mod:`refattn.training` takes for an activation setting: a registered name as
    itself (results and checkpoints keep it as they always did), anything else as its loaded
    Activation as it trains (:func:`resolve_activation` with ``training``: a value that is not finite
    is a diverged seed, :func:`refattn.custom.divergence_as_data`)."""
    from ..custom import is_spec  # noqa: PLC0415

    return value if isinstance(value, str) and not is_spec(value) else resolve_activation(value, option, training=True)


def activation_label(value):
    """An activation setting's value as its name: ``"softmax"``; ``NAME`` for ``FILE.py:NAME``; an
    Activation's ``name`` (results keys, reports, file names)."""
    from ..custom import activation_label as label  # noqa: PLC0415

    return label(value)


def activation_record(value):
    """What a results file or checkpoint records of an activation setting: a registered name as itself
    (as always, so files made before resume), anything else as ``{"name", "file", "sha256"}``
    (:func:`refattn.custom.activation_record`): a changed formula changes the record, and the run is
    refused instead of resumed."""
    from ..custom import activation_record as record  # noqa: PLC0415

    return record(resolve_activation(value) if not isinstance(value, str) or ":" in value else value)


def figure_fields(settings):
    """The settings' fields for a figure's file name (``FIGURE.format(**...)``): an activation
    setting by its name (:func:`activation_label`), never a path."""
    out = dataclasses.asdict(settings)
    for f in dataclasses.fields(settings):
        if "activation" in f.metadata and out[f.name] is not None:
            value = getattr(settings, f.name)
            out[f.name] = (activation_label(value) if isinstance(value, str) or not isinstance(value, tuple)
                           else tuple(activation_label(v) for v in value))
    return out


def _check_activation_value(value, meta, option):
    """One value of an activation setting (:func:`activation_option`): usable now, or one line."""
    if isinstance(value, str):
        _check_text(value, option)
        if value in meta["activation"]:
            return
    from ..core.activations import _REGISTRY  # noqa: PLC0415
    from ..custom import is_spec  # noqa: PLC0415

    if isinstance(value, str) and not is_spec(value) and value not in _REGISTRY:
        names = ", ".join(tuple(_REGISTRY) + tuple(meta["activation"]))
        raise ValueError(f"{option}: {value!r} is not one of {names}, nor FILE.py:NAME")
    resolve_activation(value, option)


def _check_activations(value, meta, option, many):
    """An activation setting: each value usable (:func:`_check_activation_value`), none named twice."""
    values = value if many else (value,)
    if many and (not isinstance(value, tuple) or not value):
        raise ValueError(f"{option}: expected a non-empty list of values, got {value!r}")
    for v in values:
        _check_activation_value(v, meta, option)
    labels = [activation_label(v) for v in values]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ValueError(f"{option}: {twice[0]} is given twice; each activation once")


def max_memory():
    """The ``max_memory`` setting of the studies that check their memory estimate before any work."""
    return option(None, "GiB the run may use (default: the memory available now); a run estimated to need "
                        "more is refused before any work", metavar="GIB", positive=True)


#: The metadata keys that carry a range rule (:func:`check_settings`).
RANGE_RULES = ("low", "high", "positive", "items")


def option_name(f):
    """A settings field as the command line writes it: ``--eval-every`` (or ``figure``, positional)."""
    return f.name if f.metadata.get("positional") else "--" + f.name.replace("_", "-")


def command_fields(cls):
    """The fields of the settings class ``cls`` that the command line has an option for (not ``cli=False``)."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True)]


def _check_number(value, kind, meta, option):
    shown = repr(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise ValueError(f"{option}: expected {'a whole number' if kind is int else 'a number'}, got {shown}")
    if not math.isfinite(value):
        raise ValueError(f"{option}: expected a finite number, got {shown}")
    if meta.get("positive") and not value > 0:
        raise ValueError(f"{option}: expected a number > 0, got {shown}")
    if "low" in meta and value < meta["low"]:
        raise ValueError(f"{option}: expected {'an integer' if kind is int else 'a number'} >= {meta['low']}, "
                         f"got {shown}")
    if "high" in meta and value > meta["high"]:
        raise ValueError(f"{option}: expected {'an integer' if kind is int else 'a number'} <= {meta['high']}, "
                         f"got {shown}")


def _check_text(value, option):
    if not isinstance(value, str):
        raise ValueError(f"{option}: expected text, got {value!r}")
    if not value.strip():
        raise ValueError(f"{option}: expected a non-empty value, got {value!r}")
    if "\0" in value:
        raise ValueError(f"{option}: expected text without a NUL character, got {value!r}")


def _check_name(value, meta, option):
    """The ``one_of`` and ``check`` rules of a name (:func:`option`)."""
    if "one_of" in meta and value not in meta["one_of"]:
        raise ValueError(f"{option}: {value!r} is not one of {', '.join(meta['one_of'])}")
    if "check" in meta:
        try:
            meta["check"](value)
        except ValueError as exc:  # the checking function names its own parameter: name the option
            raise ValueError(f"{option}: {str(exc).split(': ', 1)[-1]}") from None


def _check_output(kind, value, option):
    """An output path, checked and locked for this run before any work."""
    from ..training.runs import check_results_path  # noqa: PLC0415
    from ..training.train import check_checkpoint  # noqa: PLC0415

    if kind == "checkpoint":
        check_checkpoint(value, option)
    elif kind == "checkpoint_dir":
        check_folder(value, option)
    elif kind == "results":
        check_results_path(value, option)
    else:  # pragma: no cover - a settings class with a typo
        raise TypeError(f"{option}: unknown output kind {kind!r}")


def check_folder(path, option):
    """``path`` is a folder this run can write into (made if missing), or one line naming ``option``."""
    import tempfile  # noqa: PLC0415

    name = os.fspath(path)
    if os.path.exists(name) and not os.path.isdir(name):
        raise ValueError(f"{option}: {name!r} is a file; expected a folder")
    try:
        os.makedirs(name, exist_ok=True)
        with tempfile.TemporaryFile(dir=name):
            pass
    except OSError as exc:
        raise ValueError(f"{option}: cannot write into {name!r} ({exc.strerror or exc})") from None


def check_device(device, option="--device"):
    """``"gpu"`` needs CuPy and a CUDA device: one line naming ``option`` where there is none."""
    if device == "gpu":
        from ..core.backend import cupy_available  # noqa: PLC0415

        if not cupy_available():
            raise ValueError(f"{option}: 'gpu' needs CuPy and a CUDA device, and none was found here; "
                             f"use {option} cpu (or install refattn's 'gpu' extra on a machine with a GPU)")


def check_settings(settings):
    """Check every field of a study's ``settings`` against the rules of its metadata (:func:`option`),
    before any work: numbers finite and in range, lists non-empty and without repeats, text non-empty,
    choices among the choices, output paths writable and locked for this run, the device present.

    Raises
    ------
    ValueError
        One line naming the option as the command line writes it and the value given.

    Rules that tie settings together live in the settings class's own
    ``check(self)`` method, called after the fields' rules. A field with no
    option (``cli=False``) is Python's to give and is not checked here.
    """
    hints = typing.get_type_hints(type(settings))
    fields = command_fields(type(settings))
    for f in fields:
        value, meta, option = getattr(settings, f.name), f.metadata, option_name(f)
        if value is None:
            continue
        tp = _unwrap(hints[f.name])
        if "activation" in meta:
            _check_activations(value, meta, option, typing.get_origin(tp) is tuple)
            continue
        if tp is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{option}: expected True or False, got {value!r}")
            continue
        if typing.get_origin(tp) is tuple:
            kinds = typing.get_args(tp)
            fixed = kinds[-1] is not Ellipsis
            if not isinstance(value, tuple) or not value or (fixed and len(value) != len(kinds)):
                raise ValueError(f"{option}: expected {len(kinds) if fixed else 'a non-empty list of'} values, "
                                 f"got {value!r}")
            rules = meta.get("items", ({},) * len(kinds)) if fixed else (meta,) * len(value)
            names = meta.get("metavar") if fixed and isinstance(meta.get("metavar"), tuple) else None
            for i, (item, kind) in enumerate(zip(value, kinds if fixed else kinds[:1] * len(value))):
                where = f"{option} {names[i]}" if names else option
                if kind is str:
                    _check_text(item, where)
                    _check_name(item, meta, where)
                else:
                    _check_number(item, kind, rules[i], where)
            twice = sorted({str(v) for v in value if value.count(v) > 1})
            if twice and not fixed:
                raise ValueError(f"{option}: {twice[0]} is given twice; each value once")
            continue
        if tp is str:
            _check_text(value, option)
            if "choices" in meta and value not in meta["choices"]:
                raise ValueError(f"{option}: expected one of {', '.join(meta['choices'])}, got {value!r}")
            _check_name(value, meta, option)
        else:
            _check_number(value, tp, meta, option)
    if hasattr(settings, "check"):
        settings.check()
    given = [(f, getattr(settings, f.name)) for f in fields if getattr(settings, f.name) is not None]
    for f, value in given:
        if f.metadata.get("device"):
            check_device(value, option_name(f))
    for f, value in given:  # the files last: nothing is locked for settings refused above
        if "output" in f.metadata:
            _check_output(f.metadata["output"], value, option_name(f))


def field_type(annotation):
    """``(type, optional)`` of a settings field's annotation: ``int | None`` is ``(int, True)``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(annotation))
    return annotation, False


def _unwrap(annotation):
    return field_type(annotation)[0]
