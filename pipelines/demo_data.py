"""Deterministic synthetic demo data: a case-control study and a year of hospital visits.

Shipped as a generator, not as files. ``write_demo_data`` materializes both tables as parquet into
a confidential-store directory (only if absent), so the demo and the tests need no large fixtures.

The public key domains below are constants so release specs can list them. They deliberately
contain values with no rows (region ``Islands`` in the case-control study, clinic ``Islands-4``
in the visits) so "empty groups are still released" is exercised, and the visits table contains
a few rows whose keys lie outside the public domain (clinic ``UNKNOWN``, null region) so
"rows outside the public domain are dropped" is exercised.

Choice of layout: visits are written as ONE parquet file sorted by ``visit_date`` with small row
groups, not partitioned by month. A monthly release filters ``visit_date`` in a polars
``scan_parquet``; row-group statistics on the sorted column prune the other months, so the
confidential store stays "one file per table" and the same table also serves multi-month
(single-run backfill) releases without stitching files together.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import numpy as np
import polars as pl

from dprelease.files import atomic_path

__all__ = [
    "AGE_BANDS",
    "CASE_STATUSES",
    "CLINICS",
    "CLINICS_BY_REGION",
    "EMPTY_CLINIC",
    "EMPTY_CASE_CONTROL_REGION",
    "GENOTYPES",
    "MONTHS",
    "MONTH_STARTS",
    "N_CASES",
    "N_CONTROLS",
    "N_PARTICIPANTS",
    "OUT_OF_DOMAIN_CLINIC",
    "RARE_CLINIC",
    "REGIONS",
    "SEXES",
    "clinic_keys",
    "generate_case_control",
    "generate_visits",
    "write_demo_data",
]

# --- public key domains (public knowledge, never derived from the data) -----------------------

REGIONS: tuple[str, ...] = (
    "Northland",
    "Eastvale",
    "Southport",
    "Westmoor",
    "Midlands",
    "Highlands",
    "Coastal",
    "Islands",
)
CLINICS_BY_REGION: dict[str, tuple[str, ...]] = {
    region: tuple(f"{region}-{i}" for i in range(1, 5)) for region in REGIONS
}
CLINICS: tuple[str, ...] = tuple(c for region in REGIONS for c in CLINICS_BY_REGION[region])
SEXES: tuple[str, ...] = ("F", "M")
AGE_BANDS: tuple[str, ...] = ("18-29", "30-44", "45-59", "60-74", "75+")
GENOTYPES: tuple[int, ...] = (0, 1, 2)
CASE_STATUSES: tuple[str, ...] = ("case", "control")
MONTHS: tuple[str, ...] = tuple(f"2024-{m:02d}" for m in range(1, 13))
MONTH_STARTS: tuple[date, ...] = tuple(date(2024, m, 1) for m in range(1, 13))

# --- intentional quirks -------------------------------------------------------------------------

EMPTY_CASE_CONTROL_REGION = "Islands"  # public region with no study participants
EMPTY_CLINIC = "Islands-4"  # public clinic that never has a visit
RARE_CLINIC = "Islands-3"  # public clinic with only a handful of visits
OUT_OF_DOMAIN_CLINIC = "UNKNOWN"  # not in CLINICS: such rows must be dropped by a release

# --- sizes --------------------------------------------------------------------------------------

N_CASES = 547
N_CONTROLS = 548
N_PARTICIPANTS = N_CASES + N_CONTROLS  # 2n + 1 = 1095 as in the paper's section 4

_YEAR_START = date(2024, 1, 1)
_YEAR_DAYS = 366  # 2024 is a leap year
_EPOCH_DAY_2024 = (_YEAR_START - date(1970, 1, 1)).days

# Region weights (sum to 1). Case-control participants come from the first seven regions only.
_REGION_P = np.array([0.20, 0.16, 0.15, 0.14, 0.13, 0.10, 0.08, 0.04])
# Within-region clinic weights; for Islands the 3rd clinic is rare and the 4th is never used.
_CLINIC_P = np.array([0.45, 0.30, 0.20, 0.05])
_ISLANDS_CLINIC_P = np.array([0.70, 0.2995, 0.0005, 0.0])


def clinic_keys() -> pl.DataFrame:
    """Public keys table of the 32 valid (region, clinic) pairs, in declaration order."""
    return pl.DataFrame(
        {
            "region": [r for r in REGIONS for _ in CLINICS_BY_REGION[r]],
            "clinic": list(CLINICS),
        }
    )


def _take(values: tuple[str, ...], idx: np.ndarray) -> pl.Series:
    """Vectorized lookup of string domain values by integer index."""
    return pl.Series(values, dtype=pl.String).gather(pl.Series(idx, dtype=pl.UInt32))


def generate_case_control(seed: int = 2006) -> pl.DataFrame:
    """Case-control study with exactly 547 cases and 548 controls (1,095 participants).

    Cases carry more risk alleles (allele frequency 0.40 vs 0.25, Hardy-Weinberg genotypes) and
    are somewhat older. No participant lives in ``EMPTY_CASE_CONTROL_REGION``.
    """
    # Synthetic demo data, not DP noise: a seeded PCG64 is fine (and wanted) here.
    rng = np.random.default_rng(seed)
    n = N_PARTICIPANTS
    is_case = np.zeros(n, dtype=bool)
    is_case[:N_CASES] = True
    rng.shuffle(is_case)

    region_p = _REGION_P[:-1] / _REGION_P[:-1].sum()
    region = rng.choice(len(REGIONS) - 1, size=n, p=region_p)
    sex = rng.choice(len(SEXES), size=n, p=[0.52, 0.48])
    age_case = rng.choice(len(AGE_BANDS), size=n, p=[0.08, 0.17, 0.27, 0.30, 0.18])
    age_ctrl = rng.choice(len(AGE_BANDS), size=n, p=[0.16, 0.24, 0.26, 0.22, 0.12])
    age = np.where(is_case, age_case, age_ctrl)

    freq = np.where(is_case, 0.40, 0.25)  # risk-allele frequency
    genotype = rng.binomial(2, freq).astype(np.int8)

    return pl.DataFrame(
        {
            "participant_id": pl.Series(np.arange(1, n + 1), dtype=pl.Int64),
            "region": _take(REGIONS, region),
            "sex": _take(SEXES, sex),
            "age_band": _take(AGE_BANDS, age),
            "genotype": pl.Series(genotype, dtype=pl.Int8),
            "case_status": _take(CASE_STATUSES, np.where(is_case, 0, 1)),
        }
    )


def generate_visits(
    seed: int = 2024,
    n_patients: int = 120_000,
    mean_visits: float = 8.33,
    n_unknown_clinic: int = 25,
    n_null_region: int = 12,
    n_cost_outliers: int = 20,
) -> pl.DataFrame:
    """About ``n_patients * mean_visits`` (default ~1M) hospital visits over 2024, sorted by date.

    Each patient has a home region and visits clinics of that region on days spread over the whole
    year, so patients recur across months. Costs are lognormal (rising with length of stay) plus
    ``n_cost_outliers`` extreme values; ``length_of_stay`` is mostly 0 with a long tail past 30.
    ``n_unknown_clinic`` rows get clinic ``UNKNOWN`` and ``n_null_region`` rows a null region.
    """
    if n_patients < 1 or mean_visits < 1:
        raise ValueError("n_patients and mean_visits must be at least 1")
    # Synthetic demo data, not DP noise: a seeded PCG64 is fine (and wanted) here.
    rng = np.random.default_rng(seed)

    # Visits per patient: 1 + negative binomial (over-dispersed; a few heavy users).
    extra_mean, shape = mean_visits - 1.0, 2.0
    n_visits = 1 + rng.negative_binomial(shape, shape / (shape + extra_mean), size=n_patients)
    patient = np.repeat(np.arange(1, n_patients + 1, dtype=np.int64), n_visits)
    n = patient.size

    home_region = rng.choice(len(REGIONS), size=n_patients, p=_REGION_P)
    region = home_region[patient - 1]
    within = rng.choice(len(_CLINIC_P), size=n, p=_CLINIC_P)
    islands = region == REGIONS.index("Islands")
    within[islands] = rng.choice(len(_CLINIC_P), size=int(islands.sum()), p=_ISLANDS_CLINIC_P)
    clinic = region * len(_CLINIC_P) + within

    day = rng.integers(0, _YEAR_DAYS, size=n)

    inpatient = rng.random(n) < 0.3
    los = np.where(inpatient, rng.geometric(0.18, size=n), 0)
    long_stay = rng.random(n) < 0.002
    los = np.where(long_stay, rng.integers(31, 121, size=n), los)

    cost = rng.lognormal(mean=np.log(180.0), sigma=0.9, size=n) * (1.0 + 0.8 * los)
    outliers = rng.choice(n, size=min(n_cost_outliers, n), replace=False)
    cost[outliers] = rng.uniform(250_000.0, 2_500_000.0, size=outliers.size)
    cost = np.round(cost, 2)

    clinic_s = _take(CLINICS, clinic)
    region_s = _take(REGIONS, region)
    bad = rng.choice(n, size=min(n_unknown_clinic + n_null_region, n), replace=False)
    unknown_rows, null_rows = bad[:n_unknown_clinic], bad[n_unknown_clinic:]
    clinic_s = clinic_s.scatter(unknown_rows, OUT_OF_DOMAIN_CLINIC)
    region_s = region_s.scatter(null_rows, None)

    df = pl.DataFrame(
        {
            "patient_id": pl.Series(patient, dtype=pl.Int64),
            "visit_date": pl.Series(day + _EPOCH_DAY_2024, dtype=pl.Int32).cast(pl.Date),
            "region": region_s,
            "clinic": clinic_s,
            "cost": pl.Series(cost, dtype=pl.Float64),
            "length_of_stay": pl.Series(los, dtype=pl.Int64),
        }
    )
    return df.sort("visit_date", "patient_id", maintain_order=True)


def write_demo_data(directory: Path, *, overwrite: bool = False) -> dict[str, Path]:
    """Write ``case_control.parquet`` and ``visits.parquet`` into ``directory`` if absent.

    Existing files are left untouched unless ``overwrite``; returns ``{table name: path}``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    generators = {"case_control": generate_case_control, "visits": generate_visits}
    paths: dict[str, Path] = {}
    for name, generate in generators.items():
        path = directory / f"{name}.parquet"
        if overwrite or not path.exists():
            with atomic_path(path) as temporary:  # readers never see half a file
                generate().write_parquet(temporary, statistics=True, row_group_size=50_000)
        paths[name] = path
    return paths
