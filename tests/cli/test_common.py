"""cli/common.py: the options several commands share are defined once, so every command that takes one parses it
the same way and documents it in the same words."""

from __future__ import annotations

import inspect

import pytest

from kilobyte.cli import build_parser


def _options(command: str) -> dict:
    """option string (or positional dest) -> its argparse action, for one sub-command."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")  # argparse keeps sub-parsers only here
    out = {}
    for action in sub.choices[command]._actions:
        for name in action.option_strings or [action.dest]:
            out[name] = action
    return out


def _same(commands, option):
    actions = [_options(c)[option] for c in commands]
    first = actions[0]
    for a in actions[1:]:
        assert (a.help, a.choices, a.default, a.metavar) == (first.help, first.choices, first.default, first.metavar)
    return first


def test_plan_and_compile_share_the_planner_options():
    assert _same(("plan", "compile"), "--no-inplace").default is False
    assert _same(("plan", "compile"), "--kernels").choices == ("portable", "dsp", "mve")
    assert _same(("plan", "compile"), "--conv-columns").choices == ("free", "wide")
    parser = build_parser()
    for argv in (["plan", "m"], ["compile", "m", "--out", "o"]):
        args = parser.parse_args(argv)
        assert (args.no_inplace, args.kernels, args.conv_columns) == (False, "portable", "free")
        args = parser.parse_args(argv + ["--no-inplace", "--kernels", "dsp", "--conv-columns", "wide"])
        assert (args.no_inplace, args.kernels, args.conv_columns) == (True, "dsp", "wide")


def test_a_kernel_set_outside_the_runtime_is_refused_by_every_command(capsys):
    for argv in (["plan", "m"], ["compile", "m", "--out", "o"], ["search"], ["bench", "d", "-t", "cortex-m4"],
                 ["prune", "m", "--data", "digits", "--sparsity", "0.5", "--out", "o"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv + ["--kernels", "neon"])
        assert "invalid choice: 'neon'" in capsys.readouterr().err


def test_the_other_shared_options_read_the_same_everywhere():
    assert _same(("compile", "quantize"), "--samples").default == 64
    assert _same(("verify", "bench"), "dir").help == "directory written by `kilobyte compile`"
    files = _same(("plan", "compile", "profile", "prune", "bench", "devices", "search"), "--devices-file")
    assert files.help == "TOML file with extra devices (default: $KILOBYTE_DEVICES)"
    assert _same(("prune", "search", "verify"), "--json").help == "print the report as JSON"
    assert _options("compile")["--json"].help == "print the fit report as JSON"


def test_every_command_is_documented_by_its_register_docstring(capsys):
    """`kilobyte --help` lists each command with its docstring's first line; `kilobyte NAME --help` shows the rest
    (argparse rewraps it, so compare the words)."""
    from kilobyte.cli import COMMANDS

    for cmd in COMMANDS:
        head, _, rest = inspect.cleandoc(cmd.register.__doc__).partition("\n\n")
        assert head and rest, f"{cmd.__name__}: the docstring needs a help line and a description"
        parser = build_parser()
        name = next(c for c, p in parser._subparsers._group_actions[0].choices.items()
                    if p.description and p.description.split() == rest.split())
        with pytest.raises(SystemExit):
            parser.parse_args([name, "--help"])
        assert " ".join(rest.split()[:8]) in " ".join(capsys.readouterr().out.split())
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--help"])
        assert " ".join(head.split()[:6]) in " ".join(capsys.readouterr().out.split())
