"""dprelease: differentially private counts, sums and means of dataframes, with a ledger.

    import dprelease as dp

    spec = dp.ReleaseSpec.from_yaml("visits.yaml")     # or built in Python, same fields
    dp.plan(spec, epsilon=0.5)                          # accuracy before spending (no data)
    result = dp.release(df, spec, epsilon=0.5, ledger="ledger.sqlite")
    result.table, result.to_pandas(), result.manifest, result.accuracy

The user guide is docs/guide.md; the privacy rule PRIVACY.md. The library imports no Dagster;
`pipelines/` is the Dagster code location built on it.

`dp.release` is the function: the internal module of the same name is reached with
`from dprelease.pure_release import …` (or importlib), not as an attribute of the package.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dprelease")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

from dprelease.api import ReleaseResult, plan, release  # noqa: E402  (after __version__)
from dprelease.errors import DPReleaseError  # noqa: E402
from dprelease.ledger import Ledger  # noqa: E402
from dprelease.manifest import Manifest  # noqa: E402
from dprelease.planner import ReleasePlan, StatisticAccuracy  # noqa: E402
from dprelease.spec import (  # noqa: E402
    CountStatistic,
    FileDomain,
    GroupBy,
    MeanStatistic,
    PeriodSpec,
    PostProcessing,
    RangeDomain,
    ReleaseSpec,
    SumStatistic,
    ValuesDomain,
)

__all__ = [
    "CountStatistic",
    "DPReleaseError",
    "FileDomain",
    "GroupBy",
    "Ledger",
    "Manifest",
    "MeanStatistic",
    "PeriodSpec",
    "PostProcessing",
    "RangeDomain",
    "ReleasePlan",
    "ReleaseResult",
    "ReleaseSpec",
    "StatisticAccuracy",
    "SumStatistic",
    "ValuesDomain",
    "__version__",
    "plan",
    "release",
]
