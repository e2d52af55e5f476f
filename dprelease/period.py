"""A reporting period: one calendar month, with exactly one spelling.

Why a type: the ledger keys a release slot and a period's spending by the period's text. If
'2024-01', '2024-01\\n' and '２０２４-01' (full-width digits) all meant January 2024 but were three
keys, one month could be released three times with independent noise, each charged as if it
were the first, and averaging the copies would remove the noise. So a period is parsed once,
strictly (ASCII digits, the whole text), and only its canonical spelling travels further.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from dprelease.errors import SpecError

_MONTH = re.compile(r"([0-9]{4})-(0[1-9]|1[0-2])", re.ASCII)


class Period(NamedTuple):
    """A month, YYYY-MM."""

    year: int
    month: int

    @classmethod
    def parse(cls, text: str, field: str = "period") -> Period:
        """The month `text` spells, refused (SpecError naming `field`) unless it is exactly
        YYYY-MM in ASCII digits: no spaces, no trailing newline, no other digits."""
        found = _MONTH.fullmatch(text) if isinstance(text, str) else None
        if found is None or found.group(1) == "0000":
            raise SpecError(field, f"{text!r} is not a month of the form YYYY-MM")
        return cls(int(found.group(1)), int(found.group(2)))

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}"

    def following(self) -> Period:
        """The next month."""
        return Period(self.year + self.month // 12, self.month % 12 + 1)

    def preceding(self) -> Period:
        """The month before."""
        return Period(self.year - (self.month == 1), (self.month - 2) % 12 + 1)
