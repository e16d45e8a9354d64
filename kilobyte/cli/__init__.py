"""CLI stage: the `kilobyte` command. Each sub-command lives in its own module and registers itself here; it parses
its arguments, calls the driver (`kilobyte.driver`: load, compile, verify, fit) or the API, and prints.

Exit codes: 0 success, 1 error (one line on stderr, never a traceback for a user mistake), 2 "does not fit".
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import __version__
from ..errors import KilobyteError
from . import (
    bench_cmd,
    compile_cmd,
    demo_cmd,
    devices_cmd,
    evaluate_cmd,
    plan_cmd,
    profile_cmd,
    prune_cmd,
    quantize_cmd,
    run_cmd,
    search_cmd,
    verify_cmd,
)

COMMANDS = [search_cmd, demo_cmd, profile_cmd, quantize_cmd, prune_cmd, run_cmd, plan_cmd, compile_cmd, verify_cmd,
            evaluate_cmd, bench_cmd, devices_cmd]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kilobyte",
        description="Make deep learning fit on microcontrollers: profile, quantise, plan memory and generate C.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in COMMANDS:
        cmd.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(__version__)
        return 0
    if not args.command:
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except KilobyteError as e:
        print(f"kilobyte: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("kilobyte: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`kilobyte bench ... | head`): stop quietly, like other tools

        try:  # no second error when Python flushes stdout at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is not a real file (embedded, tests)
            pass
        return 141


if __name__ == "__main__":
    sys.exit(main())
