"""dprelease: differentially private counts, sums, means, ratios, shares and quantiles of
dataframes, and tables of answers randomized on the respondents' devices (local DP), with a
ledger.

    import dprelease as dp

    spec = dp.ReleaseSpec.from_yaml("visits.yaml")     # or built in Python, same fields
    dp.plan(spec, epsilon=0.5)                          # accuracy before spending (no data)
    result = dp.release(df, spec, epsilon=0.5, ledger="ledger.sqlite")
    result.table, result.to_pandas(), result.manifest, result.accuracy

The user guide is docs/guide.md; the privacy rule PRIVACY.md; docs/architecture.md the map of
the package. The library imports no Dagster; `pipelines/` is the Dagster code location on it.

`import dprelease` loads nothing heavy: each name below is imported on first use, so a command
line, a Dagster run worker or a notebook pays only for what it touches.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

#: Public name → the module that defines it (imported on first access, PEP 562).
_EXPORTS = {
    "ReleaseResult": "dprelease.api",
    "plan": "dprelease.api",
    "release": "dprelease.api",
    "DPReleaseError": "dprelease.errors",
    "Ledger": "dprelease.ledger",
    "Manifest": "dprelease.statement",
    "ReleasePlan": "dprelease.statement",
    "StatisticAccuracy": "dprelease.statement",
    "ProtectedChange": "dprelease.change",
    "PrivacyLoss": "dprelease.loss",
    "Period": "dprelease.period",
    "CountStatistic": "dprelease.spec",
    "FileDomain": "dprelease.spec",
    "GroupBy": "dprelease.spec",
    "MeanStatistic": "dprelease.spec",
    "PeriodSpec": "dprelease.spec",
    "PostProcessing": "dprelease.spec",
    "QuantileStatistic": "dprelease.spec",
    "RangeDomain": "dprelease.spec",
    "RatioStatistic": "dprelease.spec",
    "ReleaseSpec": "dprelease.spec",
    "ShareStatistic": "dprelease.spec",
    "SumStatistic": "dprelease.spec",
    "SurveyWeight": "dprelease.spec",
    "ValuesDomain": "dprelease.spec",
}

__all__ = [
    "CountStatistic",
    "DPReleaseError",
    "FileDomain",
    "GroupBy",
    "Ledger",
    "Manifest",
    "MeanStatistic",
    "Period",
    "PeriodSpec",
    "PostProcessing",
    "PrivacyLoss",
    "ProtectedChange",
    "QuantileStatistic",
    "RangeDomain",
    "RatioStatistic",
    "ReleasePlan",
    "ReleaseResult",
    "ReleaseSpec",
    "ShareStatistic",
    "StatisticAccuracy",
    "SumStatistic",
    "SurveyWeight",
    "ValuesDomain",
    "__version__",
    "local",
    "plan",
    "release",
]

if TYPE_CHECKING:
    from dprelease.api import ReleaseResult, plan, release
    from dprelease.change import ProtectedChange
    from dprelease.errors import DPReleaseError
    from dprelease.ledger import Ledger
    from dprelease.loss import PrivacyLoss
    from dprelease.period import Period
    from dprelease.spec import (
        CountStatistic,
        FileDomain,
        GroupBy,
        MeanStatistic,
        PeriodSpec,
        PostProcessing,
        QuantileStatistic,
        RangeDomain,
        RatioStatistic,
        ReleaseSpec,
        ShareStatistic,
        SumStatistic,
        SurveyWeight,
        ValuesDomain,
    )
    from dprelease.statement import Manifest, ReleasePlan, StatisticAccuracy


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from dprelease._version import version

        return version()
    if name == "local":  # the local-DP face: dp.local.randomize, .record_wave, .plan
        return import_module("dprelease.local")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dprelease' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return __all__
