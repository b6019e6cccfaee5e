"""Command-line entry point: one sub-command a module in ``planner/commands/``.

Each command module exposes ``register(subparsers)`` (adds its parser and sets ``func``).
Errors the planner raises on purpose print as one line on stderr with exit code 2; no
traceback reaches the user.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from planner.errors import PlannerError

COMMANDS = ("catalog", "fit", "validate", "predict", "recommend", "store")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m planner", description="Servewise planner: catalog, fit, predict, plan."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"planner.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"planner.commands.{name}":
                continue  # not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except PlannerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
