"""One way to run a study: every module of refattn/studies is registered, defines its settings as a
dataclass, and its command's options are exactly those fields (so a default cannot drift); every
command answers --help without naming work items and runs at a tiny size."""

import argparse
import dataclasses
import json
import pathlib
import re

import pytest

from refattn.cli import build_parser, main, settings_from_args
from refattn.studies import SHARED, STUDIES, command_fields, study
from tests.support import TINY

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]


def subparsers(parser):
    """``{command: parser}`` of an argparse parser's subcommands."""
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_every_module_of_the_studies_package_is_a_registered_command():
    modules = {p.stem for p in (ROOT / "refattn" / "studies").glob("*.py") if p.stem != "__init__"}
    assert modules == set(STUDIES.values()) | set(SHARED)  # the shared helpers are not studies
    assert not set(SHARED) & set(STUDIES.values())
    assert len(set(STUDIES.values())) == len(STUDIES)  # one command per module
    assert set(STUDIES) <= set(subparsers(build_parser()))


#: Values for the settings without a default (a positional figure, the basis of a task).
REQUIRED = {"nt-figure": ["fig4"], "nt-sensitivity": ["fig4"], "nt-cycles": ["--N", "2", "--tau", "1"],
            "curves": [str(ROOT / "derivations" / "data" / "15-sensitivity-fig7-128.json")]}


@pytest.mark.parametrize("command", list(STUDIES))
def test_the_options_are_the_fields_of_the_settings_dataclass(command):
    module = study(command)
    cls = module.Settings
    assert dataclasses.is_dataclass(cls)
    for name in ("run", "report"):
        assert callable(getattr(module, name)), name
    if hasattr(module, "plot"):
        assert isinstance(module.FIGURE, str) and module.FIGURE.endswith(".png")
    parser = subparsers(build_parser())[command]
    actions = {a.dest: a for a in parser._actions if a.dest not in ("help", "json", "out")
               and a.help != argparse.SUPPRESS}  # an old spelling is hidden, beside its option
    fields = {f.name: f for f in command_fields(cls)}  # a field with cli=False has no option
    assert set(actions) == set(fields)
    assert ("out" in {a.dest for a in parser._actions}) == hasattr(module, "plot")
    for name, f in fields.items():
        action = actions[name]
        assert f.metadata.get("help"), f"{command}: field {name} has no help"
        if f.metadata.get("positional"):
            assert action.option_strings == []
        else:
            assert action.option_strings == ["--" + name.replace("_", "-")]
        assert list(action.choices or ()) == list(f.metadata.get("choices", ()))
    # the defaults: parsing only the required values gives the dataclass's own defaults
    required = REQUIRED.get(command, [])
    parsed = settings_from_args(cls, parser.parse_args(required))
    given = {k: getattr(parsed, k) for k, f in fields.items() if f.default is dataclasses.MISSING}
    assert parsed == cls(**given)


def help_texts(parser, prog="refattn"):
    """The --help text of a parser and of every subcommand below it."""
    yield prog, parser.format_help()
    for name, sub in (subparsers(parser).items() if any(isinstance(a, argparse._SubParsersAction)
                                                        for a in parser._actions) else ()):
        yield from help_texts(sub, f"{prog} {name}")


WORK_ITEM = re.compile(r"issues?\s*#?\s*\d", re.I)


@pytest.mark.parametrize("command", [None, "check", "exercises"] + list(STUDIES))
def test_every_command_answers_help_without_naming_a_work_item(command, capsys):
    with pytest.raises(SystemExit) as stop:
        main(([] if command is None else [command]) + ["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: refattn" + ("" if command is None else f" {command}"))
    assert not WORK_ITEM.search(out)


def test_no_help_text_below_a_command_names_a_work_item():
    texts = dict(help_texts(build_parser()))
    assert "refattn exercises check" in texts
    for prog, text in texts.items():
        assert not WORK_ITEM.search(text), prog


def test_a_parse_error_is_one_line_with_a_pointer_to_help(capsys):
    for argv, expected in ((["nt", "--seeds", "x"], "refattn nt: error: argument --seeds: invalid int value: 'x' "
                                                     "(see refattn nt --help)"),
                           (["no-such-command"], "refattn: error: argument COMMAND: invalid choice"),
                           (["nt-figure"], "refattn nt-figure: error: the following arguments are required")):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(expected) and "--help)" in err, err


@pytest.mark.parametrize("command", list(STUDIES))
def test_every_command_runs_at_a_tiny_size(command, sst2_folder, tmp_path, capsys):
    argv = [command] + [str(sst2_folder) if a == "SST2" else a for a in TINY[command]] + ["--json"]
    if hasattr(study(command), "plot"):
        argv += ["--out", str(tmp_path)]
    assert main(argv) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert isinstance(result, dict) and result
    if hasattr(study(command), "plot"):  # the figure is drawn, and the results file holds the whole result
        assert "warning" not in captured.err, captured.err
        figure = result.get("figure_file", result.get("figure"))
        assert pathlib.Path(figure).stat().st_size > 0
        saved = json.loads((tmp_path / f"{command}.json").read_text())
        assert saved["complete"] is True and saved["command"][:2] == ["refattn", command]


@pytest.mark.parametrize("argv, old, new, field, value", [
    (["nt", "--count-params"], "--attention", "--activation", "activation", "softmax"),
    (["lm-study"], "--variants", "--activations", "activations", ("softmax", "tanhmax")),
])
def test_an_old_spelling_is_accepted_with_a_one_line_note(argv, old, new, field, value, capsys):
    """``refattn nt --attention`` is ``--activation`` (and lm-study's ``--variants`` ``--activations``):
    the same settings, and one line on stderr saying which spelling to use."""
    parser = subparsers(build_parser())[argv[0]]
    module = study(argv[0])
    shown = ",".join(value) if isinstance(value, tuple) else value
    with_old = settings_from_args(module.Settings, parser.parse_args(argv[1:] + [old, shown]))
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"refattn {argv[0]}: note: {old} is deprecated; use {new}"]
    with_new = settings_from_args(module.Settings, parser.parse_args(argv[1:] + [new, shown]))
    assert capsys.readouterr().err == ""
    assert getattr(with_old, field) == getattr(with_new, field) == value
    assert old not in parser.format_help()  # the help lists the one spelling
