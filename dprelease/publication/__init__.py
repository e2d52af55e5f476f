"""WHAT IS PUBLISHED, for its readers: a drawn release finished for publication and written in
their formats. `publish/` is the path a release takes (when, whether, charged where); this is
what its table looks like once out.

    table, manifest = finish(table, manifest, resolved, source)   # sampling, rounding, rules
    csv_bytes(table)                                              # integral values as integers

Everything here is post-processing of the noisy values with public inputs (the spec, published
design facts, the noise source's coins for an unbiased rounding): it spends no ε, and every
flag, suppression or rounded value depends on the data only through the released values.
"""

from dprelease.publication._columns import ValueColumn, value_columns
from dprelease.publication._finish import finish
from dprelease.publication._formats import csv_bytes, integral_as_integers, stored_csv
from dprelease.publication._rounding import BaseRounded, round_to_base
from dprelease.publication._rules import Evaluated, JudgedRule, evaluate
from dprelease.publication._sampling import Z95, combined_margins

__all__ = [
    "Z95",
    "BaseRounded",
    "Evaluated",
    "JudgedRule",
    "ValueColumn",
    "combined_margins",
    "csv_bytes",
    "evaluate",
    "finish",
    "integral_as_integers",
    "round_to_base",
    "stored_csv",
    "value_columns",
]
