"""WHAT IS PUBLISHED, for its readers: a drawn release finished for publication and written in
their formats. `publish/` is the path a release takes (when, whether, charged where); this is
what its table looks like once out.

    table, manifest = finish(table, manifest, resolved, source)   # sampling, rounding, rules
    planned_publication(resolved, planned)                         # what they will do, planned
    csv_bytes(table); sdmx_csv_bytes(table, manifest); xlsx_bytes(table, manifest)

Everything here is post-processing of the noisy values with public inputs (the spec, published
design facts, the noise source's coins for an unbiased rounding): it spends no ε, and every
flag, suppression or rounded value depends on the data only through the released values.
"""

from dprelease.publication._columns import ValueColumn, value_columns
from dprelease.publication._finish import finish
from dprelease.publication._formats import (
    FORMAT_FILES,
    OBS_STATUS,
    Publishable,
    chosen_files,
    csv_bytes,
    integral_as_integers,
    number_text,
    sdmx_csv_bytes,
    stored_csv,
    xlsx_bytes,
)
from dprelease.publication._planned import planned_publication
from dprelease.publication._rounding import BaseRounded, round_to_base
from dprelease.publication._rules import Evaluated, JudgedRule, evaluate, judged_rules
from dprelease.publication._sampling import Z95, combined_margins

__all__ = [
    "FORMAT_FILES",
    "OBS_STATUS",
    "Z95",
    "BaseRounded",
    "Evaluated",
    "JudgedRule",
    "ValueColumn",
    "Publishable",
    "chosen_files",
    "combined_margins",
    "csv_bytes",
    "evaluate",
    "finish",
    "integral_as_integers",
    "judged_rules",
    "number_text",
    "planned_publication",
    "round_to_base",
    "sdmx_csv_bytes",
    "stored_csv",
    "value_columns",
    "xlsx_bytes",
]
