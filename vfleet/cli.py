"""`vfleet` command line: one module per subcommand under vfleet.commands.

A run of one subcommand (`vfleet COMMAND ...`) imports that command's module only: the gates of a fleet
run call `vfleet` once per node and step (deploy-record sign and check, render, promote --check), and
importing every command's dependencies cost each of those calls about half a second of CPU. `vfleet`
alone, `vfleet --help`, `--version` and an unknown command build the whole parser, as before.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import vfleet.commands
from vfleet import __version__
from vfleet.errors import VfleetError


def _commands() -> dict[str, str]:
    """Subcommand name -> module. Every module in vfleet/commands/ is one subcommand (a_b -> a-b)
    and defines add_parser(sub, name) and run(args) -> int."""
    mods = sorted(m.name for m in pkgutil.iter_modules(vfleet.commands.__path__) if not m.name.startswith("_"))
    return {m.replace("_", "-"): m for m in mods}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of the subcommand ONLY alone (its module the only one imported)."""
    parser = argparse.ArgumentParser(prog="vfleet", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"vfleet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in _commands().items():
        if only is not None and name != only:
            continue
        mod = importlib.import_module(f"vfleet.commands.{module}")
        p = mod.add_parser(sub, name)
        p.set_defaults(_run=mod.run)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ARGV runs when its first word names one, else None (help, version, a typo: the
    whole parser answers those)."""
    first = argv[0] if argv else ""
    return first if first in _commands() else None


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_of(args_in))
    args = parser.parse_args(args_in)
    try:
        rc: int = args._run(args)
    except VfleetError as exc:
        print(f"vfleet {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"vfleet {args.command}: interrupted", file=sys.stderr)
        return 130
    return rc


if __name__ == "__main__":
    sys.exit(main())
