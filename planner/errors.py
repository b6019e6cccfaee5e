"""Typed errors of the planner.

Every error names the field, the value and what is allowed, so a page or the command line can
show it as it is, without a traceback.
"""

from __future__ import annotations

from typing import Any


class PlannerError(Exception):
    """Base of every error the planner raises on purpose."""


class InvalidInputError(PlannerError, ValueError):
    """A value given to the planner is outside what it accepts."""

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}={value!r} is not allowed: {allowed}")


class UnknownEntityError(InvalidInputError, KeyError):
    """A GPU, model, instance or region that the catalog does not hold."""

    def __init__(
        self, field: str, value: Any, known: list[str], suggestions: list[str] | None = None
    ) -> None:
        shown = ", ".join(sorted(known)[:12])
        more = f" (and {len(known) - 12} more)" if len(known) > 12 else ""
        hint = f"; did you mean {' or '.join(suggestions)}?" if suggestions else ""
        super().__init__(field, value, f"one of {shown}{more}{hint}")

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class CatalogError(PlannerError):
    """A data file of the catalog is malformed: names file, row and field."""

    def __init__(self, file: str, row: int | None, field: str | None, problem: str) -> None:
        self.file = file
        self.row = row
        self.field = field
        self.problem = problem
        where = file
        if row is not None:
            where += f", row {row}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {problem}")


class StoreError(PlannerError):
    """The DuckDB store cannot be opened or written."""


class RunFilesError(PlannerError):
    """A run directory is missing or its run.json cannot be read."""
