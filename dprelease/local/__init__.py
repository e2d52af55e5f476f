"""Local differential privacy: answers randomized where they are given, tables from the reports.

For sensitive survey questions the agency need not hold a single true answer: each respondent's
device randomizes the answer (k-ary randomized response, optimized unary encoding or optimized
local hashing, exactly, from the CSPRNG) and sends only the report. The ε of a wave is spent
when the answers are given, so the ledger charges it when the wave is recorded; a table computed
from the reports is post-processing and is charged nothing. It is a central release of a
`kind: randomized` statistic (the one release path, the central manifest, margins and faces):
a local spec file's `release:` is one.

    import dprelease as dp
    dp.local.plan(respondents=10_000, categories=4, epsilon=1)        # local beside central
    dp.local.record_wave("drug_use.yaml", ledger=dp.Ledger("ledger.sqlite"), cap=2)
    dp.local.js_module_path()                                         # the questionnaire's code
    reports = dp.local.randomize(answers, domain=[...], epsilon=1)    # the same, in Python
    result = dp.release(reports_df, "drug_use.yaml", ledger="ledger.sqlite")  # charged nothing

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
    "load_local_spec": "dprelease.local._spec",
    "RecordedWave": "dprelease.local._wave",
    "new_scope_cap": "dprelease.local._wave",
    "Mechanism": "dprelease.mechanism.randomized",
    "WaveNotRecorded": "dprelease.errors",
    "MalformedReports": "dprelease.mechanism.kinds",
    "ReportsOfAnotherConfiguration": "dprelease.mechanism.kinds",
    "LocalPlan": "dprelease.local._plan",
    "js_module_path": "dprelease.local._api",
    "load": "dprelease.local._api",
    "plan": "dprelease.local._api",
    "randomize": "dprelease.local._api",
    "randomizer": "dprelease.local._api",
    "record_wave": "dprelease.local._api",
}

__all__ = [
    "MalformedReports",
    "ReportsOfAnotherConfiguration",
    "LocalPlan",
    "LocalSpec",
    "Mechanism",
    "RANDOMIZER_VERSION",
    "Randomizer",
    "RecordedWave",
    "WaveNotRecorded",
    "WaveSpec",
    "choose_mechanism",
    "js_module_path",
    "load",
    "load_local_spec",
    "new_scope_cap",
    "plan",
    "randomize",
    "randomizer",
    "record_wave",
]

if TYPE_CHECKING:
    from dprelease.errors import WaveNotRecorded
    from dprelease.local._api import (
        js_module_path,
        load,
        plan,
        randomize,
        randomizer,
        record_wave,
    )
    from dprelease.local._plan import LocalPlan
    from dprelease.local._spec import LocalSpec, WaveSpec, load_local_spec
    from dprelease.local._wave import RecordedWave, new_scope_cap
    from dprelease.mechanism.kinds import MalformedReports, ReportsOfAnotherConfiguration
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
