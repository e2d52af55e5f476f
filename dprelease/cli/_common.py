"""What every command shares: library errors become exit code 2 with one line on stderr."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer

from dprelease.errors import DPReleaseError

P = ParamSpec("P")
R = TypeVar("R")

EXIT_BAD_INPUT = 2


def fail(message: str) -> typer.Exit:
    """Print one line on stderr and return the exit to raise (code 2: bad input)."""
    print(f"error: {message}".replace("\n", " "), file=sys.stderr)
    return typer.Exit(code=EXIT_BAD_INPUT)


def cli_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn the library's typed errors (and unreadable files) into the one-line exit-2 contract."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (DPReleaseError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
            raise fail(str(exc)) from None

    return wrapper
