"""The one error type a user sees: a problem with their input, said in one line."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class InputError(ValueError):
    """Bad user input (a network file, a hardware config, a command-line value).

    The message is one line that names where the problem is (file and field),
    what is wrong, and what is allowed. The command line prints it and exits 2.
    """


class Terminated(KeyboardInterrupt):
    """SIGTERM, taken as Ctrl-C is (the command stops, saving what it finished); exit 143."""


class Unfinished(Exception):  # noqa: N818 - a command's outcome, not a bug
    """A command that did its work only in part (a sweep with failed rows, or interrupted):
    `output` for stdout, `message` (one line) for stderr, the exit `code`."""

    def __init__(self, message: str, code: int, output: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.output = output


def closest(word: str, allowed: Iterable[str]) -> str:
    """' (did you mean X?)' when a close match of `word` exists in `allowed`, else ''."""
    match = difflib.get_close_matches(word, list(allowed), n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


#: Most characters of a value an error message quotes (a 5,000-digit integer or a whole
#: mapping would drown the message).
MAX_QUOTED = 80


def clip_value(value: object) -> str:
    """`repr(value)`, cut to MAX_QUOTED characters ('...' and its length where cut)."""
    try:
        text = repr(value)
    except ValueError:  # an integer too long to print (Python's 4,300-digit limit)
        return "an integer of more than 4,300 digits"
    if len(text) <= MAX_QUOTED:
        return text
    return f"{text[:MAX_QUOTED - 20]}... ({len(text):,} characters)"


def why_not_a_file(path: object) -> str:
    """Why an input file cannot be read where `is_file()` said no: a folder, or nothing."""
    from pathlib import Path

    try:
        return "is a folder, not a file" if Path(str(path)).is_dir() else "not found"
    except OSError as exc:  # a name too long, a loop of links
        return str(exc.strerror or exc)
