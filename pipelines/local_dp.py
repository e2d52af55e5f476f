"""Local DP in the code location: per local spec file (`pipelines/local_specs/*.yaml`) a wave
asset and a release asset.

* `wave_<id>` records the wave in the ledger: its ε is charged to the respondents' scope (a new
  scope gets its privacy profile's cap). Materialize it before the questionnaire goes out: the ε
  is spent when the answers are given. Materializing it again charges nothing.
* `<release name>` ingests the wave's randomized answers (the confidential store's table named
  by `release.source`) and publishes the table of unbiased counts, margins and shares: the
  central release asset (`assets.release_asset`) of the file's `release:`, a `kind: randomized`
  release, recorded charged nothing (post-processing) and refused unless the wave is recorded
  with these parameters.

Both only wire the library; metadata holds the wave's public parameters and the released table
only.
"""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl

from dprelease.errors import DPReleaseError, SpecError
from dprelease.local import LocalSpec, load_local_spec, record_wave
from dprelease.spec import ResolvedSpec, load_spec
from pipelines.assets import release_asset
from pipelines.messages import refused
from pipelines.resources import LedgerResource, PrivacyPolicy

LOCAL_SPECS_DIR = Path(__file__).resolve().parent / "local_specs"
GROUP = "local_dp"
#: The demo's simulated respondents.
DEMO_RESPONDENTS = 40_000


def load_local_specs(directory: Path = LOCAL_SPECS_DIR) -> list[tuple[LocalSpec, ResolvedSpec]]:
    """Every local spec file in `directory` (sorted): its wave and its release (a central spec of
    the wave's answers); errors name the file."""
    specs = []
    for path in sorted(directory.glob("*.yaml")):
        try:
            specs.append((load_local_spec(path), load_spec(path)))
        except SpecError as exc:
            raise SpecError(f"{path.name}: {exc.path}", exc.message) from None
    keys = [wave_key(s) for s, _ in specs]
    if len(set(keys)) != len(keys):
        raise SpecError(str(directory), "two local spec files have waves of the same asset name")
    return specs


def wave_key(spec: LocalSpec) -> str:
    """The wave's asset name: `wave_` and its id, with '-' and '.' as '_'."""
    return "wave_" + re.sub(r"[-.]", "_", spec.wave.id)


def write_local_demo_data(
    spec: LocalSpec, release: ResolvedSpec, path: Path, seed: int = 11
) -> None:
    """Simulated respondents of the demo: true answers drawn (seeded) with shares falling along
    the domain and by key, each randomized exactly as a respondent's device would (the
    system CSPRNG): the confidential store holds only reports."""
    import dprelease as dp

    rng = np.random.default_rng(seed)
    domain = list(spec.wave.randomizer.domain)
    weights = np.array([0.5**i for i in range(len(domain))])
    frame: dict[str, list] = {}
    for group in release.spec.group_by:
        values = group.domain.values  # type: ignore[union-attr]  # the demo's specs list keys
        frame[group.key_columns[0]] = rng.choice(values, DEMO_RESPONDENTS).tolist()
    answers = rng.choice(len(domain), DEMO_RESPONDENTS, p=weights / weights.sum())
    frame[spec.wave.spec.question] = dp.local.randomize(
        [domain[i] for i in answers],
        domain=domain,
        epsilon=spec.wave.randomizer.epsilon,
        mechanism=spec.wave.randomizer.mechanism,
        g=spec.wave.randomizer.g,
    )
    for column in release.spec.statistics[0].read_fields():  # the answers, then their seals
        frame.setdefault(column, [spec.wave.hash] * DEMO_RESPONDENTS)  # each page posts its seal
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(frame).write_parquet(path)


def wave_asset(spec: LocalSpec) -> dg.AssetsDefinition:
    """Record one wave in the ledger (charge its ε once)."""
    wave = spec.wave

    @dg.asset(
        name=wave_key(spec),
        group_name=GROUP,
        kinds={"python"},
        description=f"Wave {wave.id!r}: question {wave.spec.question!r} asked under local DP "
        f"({wave.randomizer.mechanism}, ε = {float(wave.randomizer.epsilon):g}); materializing "
        f"it charges ε to scope {wave.spec.scope!r}, once. Do it before the questionnaire goes "
        "out.",
    )
    def wave_(ledger: LedgerResource, policy: PrivacyPolicy) -> dg.MaterializeResult:
        try:
            with ledger.open(create=True) as book:
                recorded = record_wave(spec, ledger=book, privacy=policy.profiles())
        except DPReleaseError as exc:
            raise refused(wave_key(spec), None, wave.spec.scope, exc) from None
        return dg.MaterializeResult(
            metadata={
                "ledger": recorded.describe(),
                "charged": recorded.charged,
                "epsilon": str(wave.randomizer.epsilon),
                "scope": wave.spec.scope,
                "questionnaire_config": dg.MetadataValue.json(wave.config()),
            }
        )

    return wave_


def wave_scopes(directory: Path = LOCAL_SPECS_DIR) -> dict[str, list[dg.AssetKey]]:
    """Each budget scope of a wave and its wave assets, for the privacy_budget asset."""
    scopes: dict[str, list[dg.AssetKey]] = {}
    for spec, _ in load_local_specs(directory):
        scopes.setdefault(spec.wave.spec.scope, []).append(dg.AssetKey(wave_key(spec)))
    return scopes


def local_assets(directory: Path = LOCAL_SPECS_DIR) -> list[dg.AssetsDefinition | dg.AssetSpec]:
    """The wave, source and release assets of every local spec file."""
    specs = load_local_specs(directory)
    out: list[dg.AssetsDefinition | dg.AssetSpec] = []
    for source in sorted({release.spec.source for _, release in specs}):
        out.append(
            dg.AssetSpec(
                key=source,
                group_name="confidential",
                kinds={"parquet"},
                description=f"Randomized answers {source!r} (reports, never true answers), in the "
                "confidential store with their grouping columns.",
            )
        )
    for spec, release in specs:

        def demo(path: Path, spec: LocalSpec = spec, release: ResolvedSpec = release) -> None:
            write_local_demo_data(spec, release, path)

        wave = dg.AssetKey(wave_key(spec))
        out += [wave_asset(spec), release_asset(release, deps=[wave], group_name=GROUP,
                                                demo_source=demo)]  # fmt: skip
    return out
