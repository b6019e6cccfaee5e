"""Command-line entry point: one sub-command a module in ``planner/commands/``.

Each command module exposes ``register(subparsers)`` (adds its parser and sets ``func``).
Bad arguments and errors the planner raises on purpose print as one line on stderr with exit
code 2; a file that cannot be read or written, exit code 2 too; anything unexpected, one line
and exit code 1. No traceback reaches the user.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from planner.commands.args import ArgumentError, OneLineParser, print_error
from planner.errors import PlannerError

COMMANDS = ("catalog", "fit", "validate", "predict", "recommend", "store", "ship_fit")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line; ``only``: register just that command (its module alone is imported:
    the others' imports were ~0.07 s of CPU of a ~2 s ``recommend``)."""
    parser = OneLineParser(
        prog="python -m planner", description="Servewise planner: catalog, fit, predict, plan."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name in COMMANDS:
        if only is not None and name != only:
            continue
        try:
            module = importlib.import_module(f"planner.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"planner.commands.{name}":
                continue  # not built yet
            raise
        module.register(subparsers)
    return parser


def _command_named(argv: Sequence[str]) -> str | None:
    """The command module ``argv`` names first (``ship-fit`` -> ``ship_fit``), if any."""
    name = argv[0].replace("-", "_") if argv else ""
    return name if name in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser(_command_named(argv)).parse_args(argv)
        return int(args.func(args) or 0)
    except (ArgumentError, PlannerError) as exc:
        print_error(str(exc))
        return 2
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a file named on the command line cannot be read or written
        print_error(f"{exc.filename or 'file'}: {exc.strerror or exc}")
        return 2
    except (UnicodeDecodeError, MemoryError) as exc:
        print_error(f"the input cannot be processed: {type(exc).__name__}: {exc}")
        return 2
    except KeyboardInterrupt:
        print_error("interrupted")
        return 130
    except Exception as exc:  # a bug: still one line, never a traceback
        print_error(f"unexpected {type(exc).__name__}: {exc} (please report this)")
        return 1
