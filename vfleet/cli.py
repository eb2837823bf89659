"""`vfleet` command line: one module per subcommand under vfleet.commands."""

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vfleet", description=__doc__)
    parser.add_argument("--version", action="version", version=f"vfleet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in _commands().items():
        mod = importlib.import_module(f"vfleet.commands.{module}")
        p = mod.add_parser(sub, name)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
