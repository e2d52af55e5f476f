"""The one path a release takes to the public, shared by the command line, the Python API and
the Dagster assets:

    budget = decide_budget(resolved, privacy=..., ledger=..., epsilon=...)   # how much, where
    prepared = prepare(data, resolved, budget, period=...)    # every check; reads no row
    recorded = record_release(prepared, ledger=ledger)        # reserve → draw → commit
                                   # (randomized answers: draw → reserve → commit, see _record)
    write_release_files(recorded.stored, out_dir)             # only from the ledger's copy
    # or `publish(prepared, ledger=ledger, out_dir=...)` for the last two together

Nothing is written before the ledger has stored the release, so a crash can leave an open
reservation (resumed by the next run of the same slot, without a second charge) but never a
published file that the ledger does not know; and a release's folder appears whole or not at
all (`write_release_files`: written aside, renamed into place). A slot that is already
released is returned as stored: re-runs and backfills give byte-identical files and charge
nothing. Without a ledger
(`prepared.draw()`) nothing is recorded: for exploring inside the secure environment only.
"""

from dprelease.publish._answers import ANSWER_TERMS
from dprelease.publish._budget import (
    Budget,
    Options,
    composition_of,
    decide_budget,
    plan_budget,
)
from dprelease.publish._files import RELEASE_FILES, release_folder_problem, write_release_files
from dprelease.publish._prepared import PreparedRelease, Release, noise_source_entry, prepare
from dprelease.publish._record import (
    STATUS_TEXT,
    Recorded,
    check_prerequisite,
    publish,
    record_release,
)
from dprelease.publish._validate import (
    PRIVACY_CONFIG_ENV,
    SPECS_DIR_ENV,
    Validation,
    validate_pipeline,
)

__all__ = [
    "ANSWER_TERMS",
    "PRIVACY_CONFIG_ENV",
    "RELEASE_FILES",
    "SPECS_DIR_ENV",
    "STATUS_TEXT",
    "Budget",
    "Options",
    "PreparedRelease",
    "Recorded",
    "Release",
    "Validation",
    "check_prerequisite",
    "composition_of",
    "decide_budget",
    "noise_source_entry",
    "plan_budget",
    "prepare",
    "publish",
    "record_release",
    "release_folder_problem",
    "validate_pipeline",
    "write_release_files",
]
