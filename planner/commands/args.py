"""Argument types and the parser of the command lines: a bad value is refused while parsing,
in one line that names the option, the value and what is allowed, never with a usage dump
or a traceback (``python -m planner`` and ``python -m benchmarks_runner`` share them)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from planner.errors import InvalidInputError
from planner.input_checks import finite_number


class ArgumentError(Exception):
    """A command-line argument is malformed (the message is one line)."""


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise :class:`ArgumentError` instead of printing the
    usage and exiting, so the caller prints one ``error:`` line and picks the exit code."""

    def error(self, message: str) -> NoReturn:
        # "argument --tp: <NOT_ALLOWED>0: a whole number..." -> "--tp=0 is not allowed: ..."
        head, _, rest = message.partition(f": {_NOT_ALLOWED}")
        if rest and head.startswith("argument "):
            value, _, allowed = rest.partition(_NOT_ALLOWED)
            option = head.removeprefix("argument ").split("/")[-1]
            message = f"{option}={value} is not allowed: {allowed}"
        raise ArgumentError(f"{message} (see {self.prog} --help)")


_NOT_ALLOWED = "\x00"  # frames the value in a type's message, for OneLineParser.error


def number(
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    integer: bool = False,
) -> Callable[[str], Any]:
    """An argparse ``type`` for a finite number within the bounds (an int when ``integer``)."""

    def parse(text: str) -> float | int:
        try:
            value = finite_number(
                "value", text, low=low, high=high, low_open=low_open, integer=integer
            )
        except InvalidInputError as exc:
            raise argparse.ArgumentTypeError(not_allowed(text, exc.allowed)) from None
        return int(value) if integer else value

    parse.__name__ = "integer" if integer else "number"  # argparse names the type on errors
    return parse


def not_allowed(text: str, allowed: str) -> str:
    """The message of an argparse ``type`` that refuses ``text``: the parser turns it into
    ``--option=text is not allowed: allowed``."""
    return f"{_NOT_ALLOWED}{text}{_NOT_ALLOWED}{allowed}"


def positive_int(high: float) -> Callable[[str], Any]:
    """A whole number from 1 to ``high``."""
    return number(low=1, high=high, integer=True)


def fraction(*, zero: bool = False, one: bool = True) -> Callable[[str], Any]:
    """A share: in (0, 1] by default; ``zero`` allows 0, ``one=False`` refuses 1."""
    parse_in_range = number(low=0.0, high=1.0, low_open=not zero)

    def parse(text: str) -> float:
        value = float(parse_in_range(text))
        if not one and value == 1.0:
            raise argparse.ArgumentTypeError(not_allowed(text, "a fraction below 1"))
        return value

    parse.__name__ = "fraction"
    return parse


def output_file(text: str) -> Path:
    """An argparse ``type`` for a file a command writes: a new file or a regular one to
    replace, checked before the command's work (a FIFO would block the write forever, a
    device such as /dev/full fail it only once a search of minutes is over); a line break or
    NUL in the name is refused too."""
    path = Path(text)
    if not text or any(c in text for c in "\n\r\x00"):
        raise argparse.ArgumentTypeError(
            not_allowed(repr(text), "a file name without line breaks or NUL")
        )
    try:
        exists = path.exists()
        regular = path.is_file()
    except OSError:
        exists, regular = True, False
    if exists and not regular:
        what = "a folder" if path.is_dir() else "no regular file (a FIFO, a device)"
        raise argparse.ArgumentTypeError(
            not_allowed(text, f"a regular file to write; {text} is {what}")
        )
    return path


def print_error(message: str) -> None:
    """The one line a command prints for an error it reports."""
    first = str(message).strip().splitlines()[0] if str(message).strip() else "failed"
    print(f"error: {first}", file=sys.stderr)
