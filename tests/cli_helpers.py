"""The `kilobyte` command run in-process by the CLI tests: its exit code and what it printed."""

from __future__ import annotations

from kilobyte.cli import main


def cli(capsys, *argv):
    """Run `kilobyte ARGV...` through `kilobyte.cli.main`; (exit code, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err
