"""Local differential privacy: answers randomized where they are given, tables from the reports.

For sensitive survey questions the agency need not hold a single true answer: each respondent's
device randomizes the answer (k-ary randomized response, optimized unary encoding or optimized
local hashing, exactly, from the CSPRNG) and sends only the report. The ε of a wave is spent
when the answers are given, so the ledger charges it when the wave is recorded; a table computed
from the reports is post-processing and is charged nothing.

    import dprelease as dp
    dp.local.plan(respondents=10_000, categories=4, epsilon=1)        # local beside central
    dp.local.record_wave("drug_use.yaml", ledger=dp.Ledger("ledger.sqlite"), cap=2)
    dp.local.js_module_path()                                         # the questionnaire's code
    reports = dp.local.randomize(answers, domain=[...], epsilon=1)    # the same, in Python
    result = dp.local.release(reports_df, "drug_use.yaml", ledger="ledger.sqlite")

docs/local.md is the guide; PRIVACY.md ("Local DP") says what the local model protects and what
it does not. Names load on first use, so `import dprelease.local` stays light.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "RANDOMIZER_VERSION": "dprelease.mechanism.randomized",
    "Randomizer": "dprelease.mechanism.randomized",
    "choose_mechanism": "dprelease.mechanism.randomized",
    "LocalSpec": "dprelease.local._spec",
    "WaveSpec": "dprelease.local._spec",
    "LocalReleaseSpec": "dprelease.local._spec",
    "load_local_spec": "dprelease.local._spec",
    "RecordedWave": "dprelease.local._wave",
    "new_scope_cap": "dprelease.local._wave",
    "Mechanism": "dprelease.mechanism.randomized",
    "LocalFiles": "dprelease.local._release",
    "PreparedLocal": "dprelease.local._release",
    "prepare_local": "dprelease.local._release",
    "check_out_dir": "dprelease.local._release",
    "write_local_files": "dprelease.local._release",
    "WaveNotRecorded": "dprelease.local._wave",
    "LocalRelease": "dprelease.local._release",
    "LocalManifest": "dprelease.local._manifest",
    "LocalPlan": "dprelease.local._plan",
    "js_module_path": "dprelease.local._api",
    "load": "dprelease.local._api",
    "plan": "dprelease.local._api",
    "randomize": "dprelease.local._api",
    "randomizer": "dprelease.local._api",
    "record_wave": "dprelease.local._api",
    "release": "dprelease.local._api",
}

__all__ = [
    "LocalFiles",
    "LocalManifest",
    "LocalPlan",
    "LocalRelease",
    "LocalReleaseSpec",
    "LocalSpec",
    "Mechanism",
    "PreparedLocal",
    "RANDOMIZER_VERSION",
    "Randomizer",
    "RecordedWave",
    "WaveNotRecorded",
    "WaveSpec",
    "check_out_dir",
    "choose_mechanism",
    "js_module_path",
    "load",
    "load_local_spec",
    "new_scope_cap",
    "plan",
    "prepare_local",
    "randomize",
    "randomizer",
    "record_wave",
    "release",
    "write_local_files",
]

if TYPE_CHECKING:
    from dprelease.local._api import (
        js_module_path,
        load,
        plan,
        randomize,
        randomizer,
        record_wave,
        release,
    )
    from dprelease.local._manifest import LocalManifest
    from dprelease.local._plan import LocalPlan
    from dprelease.local._release import (
        LocalFiles,
        LocalRelease,
        PreparedLocal,
        check_out_dir,
        prepare_local,
        write_local_files,
    )
    from dprelease.local._spec import LocalReleaseSpec, LocalSpec, WaveSpec, load_local_spec
    from dprelease.local._wave import RecordedWave, WaveNotRecorded, new_scope_cap
    from dprelease.mechanism.randomized import (
        RANDOMIZER_VERSION,
        Mechanism,
        Randomizer,
        choose_mechanism,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dprelease.local' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
