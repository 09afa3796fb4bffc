"""The papers' experiments: one module per study, each run the same way.

Every module defines ``Settings``, a dataclass of the study's settings (each
field written once with :func:`option`: default, help, rules; checked when the
settings are made, :class:`StudySettings`); ``run(settings, ...)``, the study,
returning a JSON-able dict; ``report(result) -> str``; where it draws a figure,
``plot(result)`` and ``FIGURE`` (the PNG's name, a format string over the
settings' fields); optionally ``status(result) -> int``, the command's exit code.
``refattn <command>`` builds its options from ``Settings`` (:mod:`refattn.cli`);
docs/cli.md says what is checked and how. From Python::

    from refattn.studies import polarity
    result = polarity.run(polarity.Settings(seeds=3, epochs=4))
    print(polarity.report(result))

:data:`SHARED` names the modules that are not studies: what several share.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import numbers
import os
import types
import typing

__all__ = ["STUDIES", "SHARED", "study", "option", "activation_option", "max_memory", "StudySettings",
           "resolve_activation", "model_activation", "figure_fields", "option_name", "command_fields",
           "field_type", "check_folder", "check_device", "RANGE_RULES"]

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

#: The metadata keys that carry a range rule.
RANGE_RULES = ("low", "high", "positive", "items")


def study(command):
    """The module of the study that ``refattn <command>`` runs (imported now)."""
    if command not in STUDIES:
        raise ValueError(f"command: expected one of {tuple(STUDIES)}, got {command!r}")
    return importlib.import_module(f"{__name__}.{STUDIES[command]}")


def option(default=dataclasses.MISSING, help="", **rules):  # noqa: A002  (the word the command line uses)
    """A settings field: its default, its ``--help`` line and its rules (docs/cli.md lists the rules)."""
    return dataclasses.field(default=default, metadata={"help": help, **rules})


def activation_option(default=dataclasses.MISSING, help="", *, also=(), **rules):  # noqa: A002
    """A field naming an activation (``str``) or several (``tuple[str, ...]``): a built-in, ``FILE.py:NAME``,
    one of ``also`` (a study's own variants) or, from Python, an Activation."""
    return option(default, f"{help} (a built-in name, or FILE.py:NAME for an activation of yours, docs/verify.md)",
                  activation=tuple(also), **rules)


def max_memory():
    """The ``max_memory`` field of the studies that check their memory estimate before any work."""
    return option(None, "GiB the run may use (default: the memory available now); a run estimated to need "
                        "more is refused before any work", metavar="GIB", positive=True)


def resolve_activation(value, option="activation", training=False):
    """The Activation an activation setting names; with ``training``, as a model trains with it
    (:func:`refattn.custom.divergence_as_data`)."""
    from ..core.activations import Activation, activation  # noqa: PLC0415
    from ..custom import divergence_as_data, is_spec, load_activation  # noqa: PLC0415

    if isinstance(value, Activation):
        if getattr(value, "refused", None) is not None:
            raise ValueError(f"{option}: activation {value.name!r} was refused when it was defined: {value.refused}")
        act = value
    elif is_spec(value):
        act = load_activation(value, option)
    else:
        act = activation(value)  # ValueError naming the registered ones
    return divergence_as_data(act) if training else act


def model_activation(value, option="activations"):
    """What a model of :mod:`refattn.training` takes: a registered name as itself, anything else loaded."""
    from ..custom import is_spec  # noqa: PLC0415

    return value if isinstance(value, str) and not is_spec(value) else resolve_activation(value, option, training=True)


def figure_fields(settings):
    """The settings' fields for a figure's file name, an activation by its name (never a path)."""
    from ..custom import activation_label  # noqa: PLC0415

    out = dataclasses.asdict(settings)
    for f in dataclasses.fields(settings):
        value = out[f.name]
        if "activation" in f.metadata and value is not None:
            out[f.name] = tuple(map(activation_label, value)) if isinstance(value, tuple) else activation_label(value)
    return out


def option_name(f):
    """A settings field as the command line writes it: ``--eval-every`` (or ``figure``, positional)."""
    return f.name if f.metadata.get("positional") else "--" + f.name.replace("_", "-")


def command_fields(cls):
    """The fields of the settings class ``cls`` that the command line has an option for (not ``cli=False``)."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True)]


def field_type(annotation):
    """``(type, optional)`` of a settings field's annotation: ``int | None`` is ``(int, True)``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(annotation))
    return annotation, False


# --------------------------------------------------------------------------
# The rules of a field, checked once, when the settings are made
# --------------------------------------------------------------------------


def _check_number(value, kind, rules, name):
    whole = kind is int
    if isinstance(value, bool) or not isinstance(value, numbers.Integral if whole else numbers.Real):
        raise TypeError(f"{name}: expected {'a whole number' if whole else 'a number'}, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    if rules.get("positive") and not value > 0:
        raise ValueError(f"{name}: expected a number > 0, got {value!r}")
    what = "an integer" if whole else "a number"
    if "low" in rules and value < rules["low"]:
        raise ValueError(f"{name}: expected {what} >= {rules['low']}, got {value!r}")
    if "high" in rules and value > rules["high"]:
        raise ValueError(f"{name}: expected {what} <= {rules['high']}, got {value!r}")


def _check_name(value, rules, name):
    value = os.fspath(value) if isinstance(value, os.PathLike) else value  # a path from Python
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise ValueError(f"{name}: expected a non-empty name, got {value!r}")
    allowed = rules.get("choices") or rules.get("one_of")
    if allowed and value not in allowed:
        raise ValueError(f"{name}: expected one of {', '.join(allowed)}, got {value!r}")
    if "check" in rules:
        try:
            rules["check"](value)
        except ValueError as exc:  # the checking function names its own parameter: name the field
            raise ValueError(f"{name}: {str(exc).split(': ', 1)[-1]}") from None


def _check_activation(value, rules, name):
    """A built-in name, one of the study's own (``also``), ``FILE.py:NAME`` that loads, or an Activation."""
    from ..core.activations import _REGISTRY  # noqa: PLC0415
    from ..custom import is_spec  # noqa: PLC0415

    if isinstance(value, str):
        _check_name(value, {}, name)
        if value in rules["activation"]:
            return
        if not is_spec(value) and value not in _REGISTRY:
            names = ", ".join(tuple(_REGISTRY) + rules["activation"])
            raise ValueError(f"{name}: {value!r} is not one of {names}, nor FILE.py:NAME")
    resolve_activation(value, name)


def _check_value(value, kind, rules, name):
    """One value against its type and rules (:func:`option`)."""
    if "activation" in rules:
        _check_activation(value, rules, name)
    elif kind is bool:
        if not isinstance(value, bool):
            raise TypeError(f"{name}: expected True or False, got {value!r}")
    elif kind is str:
        _check_name(value, rules, name)
    elif kind in (int, float):
        _check_number(value, kind, rules, name)


def _check_field(value, kind, rules, name):
    """A field's value: one value, a fixed-length tuple (its ``items`` rules), or a non-empty list
    without repeats."""
    if typing.get_origin(kind) is not tuple:
        _check_value(value, kind, rules, name)
        return
    kinds = typing.get_args(kind)
    fixed = kinds[-1] is not Ellipsis
    if not isinstance(value, tuple):
        raise TypeError(f"{name}: expected a tuple of values, got {value!r}")
    if not value or (fixed and len(value) != len(kinds)):
        raise ValueError(f"{name}: expected {len(kinds) if fixed else 'a non-empty list of'} values, got {value!r}")
    if fixed:
        names = rules.get("metavar") or ("",) * len(kinds)
        for v, k, r, m in zip(value, kinds, rules["items"], names):
            _check_value(v, k, r, f"{name} {m}".strip())
        return
    for v in value:
        _check_value(v, kinds[0], rules, name)
    if "activation" in rules:
        from ..custom import activation_label  # noqa: PLC0415

        value = [activation_label(v) for v in value]
    twice = [v for v in value if list(value).count(v) > 1]
    if twice:
        raise ValueError(f"{name}: {twice[0]!r} is given twice; each value once")


class StudySettings:
    """Base of every study's ``Settings``: each field's rules (:func:`option`) and the class's own
    :meth:`check` run when the settings are made, so a run trusts them (docs/cli.md)."""

    #: The libraries of the 'studies' extra that the study imports as it runs.
    needs = ()

    def __post_init__(self):
        for name in self.needs:
            if importlib.util.find_spec(name) is None:
                raise ValueError(f"this study needs {name} (refattn's 'studies' extra): "
                                 f"pip install 'refattn[studies]'")
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value, (kind, optional) = getattr(self, f.name), field_type(hints[f.name])
            if value is None and not optional:
                raise TypeError(f"{f.name}: expected a value, got None")
            per_key = isinstance(value, dict) and dict in typing.get_args(hints[f.name])  # {N_con: value}
            for v in (value.values() if per_key else () if value is None else (value,)):
                _check_field(v, kind, f.metadata, f.name)
            if f.metadata.get("device"):
                check_device(value, f.name)
        self.check()

    def check(self):
        """Rules that tie fields together (a study's class overrides this)."""


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


def check_device(device, option="device"):
    """``"gpu"`` needs CuPy and a CUDA device: one line naming ``option`` where there is none."""
    if device == "gpu":
        from ..core.backend import cupy_available  # noqa: PLC0415

        if not cupy_available():
            raise ValueError(f"{option}: 'gpu' needs CuPy and a CUDA device, and none was found here; "
                             f"use cpu (or install refattn's 'gpu' extra on a machine with a GPU)")
