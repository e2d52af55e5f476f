"""The aggregator's Dagster code location: `consortium_sum` adds a period's shares under
encryption and charges the ledger once; `consortium_release` post-processes the key holder's
noisy totals and publishes. A sensor starts the sum once every site's share is in, another the
release once the totals are next to the sum; both show which sites contributed.

Each site's shares arrive in a folder of the inbox named after the site (`<inbox>/<site>/`),
which the consortium's channel fills from that site's outbox alone and only the aggregator
reads (PRIVACY.md: shares are confidential to the aggregator and authenticated as their
site's); a share in another site's folder is refused.

Settings (environment): DPRELEASE_CONSORTIUM_FILE, DPRELEASE_CONSORTIUM_SPEC,
DPRELEASE_CONSORTIUM_PUBLIC_KEY, DPRELEASE_CONSORTIUM_INBOX (one folder per site),
DPRELEASE_CONSORTIUM_WORK (encrypted sums; the key holder's totals go next to each sum as
`<sum>.totals.json`), DPRELEASE_CONSORTIUM_OUT (published files, one folder per release),
DPRELEASE_LEDGER_URL, DPRELEASE_PRIVACY_CONFIG, DPRELEASE_CONSORTIUM_START (YYYY-MM).
"""

import json
from pathlib import Path

import dagster as dg

from dprelease.budget import load_privacy_profiles
from dprelease.consortium import (
    Consortium,
    ConsortiumError,
    Plan,
    PublicKey,
    aggregate,
    check_budget,
    load_consortium,
    plan_release,
    publish,
    sum_name,
)
from dprelease.ledger import Ledger
from dprelease.publish import Budget, decide_budget
from dprelease.spec import ResolvedSpec, load_spec
from pipelines.consortium._common import partition_of, partitions, period_of, required

SUM = "consortium_sum"
RELEASE = "consortium_release"


class AggregatorSettings(dg.ConfigurableResource):
    """Where the aggregator's inputs, work and outputs are (see the module docstring)."""

    consortium_file: str
    spec_file: str
    public_key: str
    inbox: str
    work: str
    out: str
    ledger_url: str
    privacy_config: str
    allow_missing: bool = False

    @classmethod
    def from_env(cls) -> "AggregatorSettings":
        return cls(
            consortium_file=required("DPRELEASE_CONSORTIUM_FILE"),
            spec_file=required("DPRELEASE_CONSORTIUM_SPEC"),
            public_key=required("DPRELEASE_CONSORTIUM_PUBLIC_KEY"),
            inbox=required("DPRELEASE_CONSORTIUM_INBOX"),
            work=required("DPRELEASE_CONSORTIUM_WORK"),
            out=required("DPRELEASE_CONSORTIUM_OUT"),
            ledger_url=required("DPRELEASE_LEDGER_URL"),
            privacy_config=required("DPRELEASE_PRIVACY_CONFIG"),
        )

    def plan(self, period: str | None) -> Plan:
        return plan_release(
            load_consortium(self.consortium_file), load_spec(self.spec_file), period
        )

    def key(self) -> PublicKey:
        path = Path(self.public_key)
        return PublicKey.parse(path.read_bytes(), str(path))

    def budget(self, plan: Plan, ledger: Ledger) -> Budget:
        budget = decide_budget(
            plan.resolved,
            scope=plan.consortium.ledger_scope,
            privacy=load_privacy_profiles(self.privacy_config),
            ledger=ledger,
            rho=plan.consortium.rho,
        )
        check_budget(plan, budget)
        return budget


def site_shares(inbox: Path, sites: tuple[str, ...]) -> list[Path]:
    """The share files in each site's folder of the inbox; ConsortiumError naming the file for
    one whose name says another site (a share must come through its own site's channel)."""
    found = []
    for site in sites:
        for path in sorted((inbox / site).glob("*.dpshare")):
            if path.name.startswith("."):
                continue
            parts = path.name.split("__")
            if len(parts) < 2 or parts[1] != site:
                raise ConsortiumError(
                    str(path), f"is not a share of {site!r} but sits in its folder; remove it"
                )
            found.append(path)
    return found


def _shares_by_period(
    settings: AggregatorSettings, consortium: Consortium, resolved: ResolvedSpec
) -> dict[str, set[str]]:
    """Sites whose share file for this consortium, spec and key is in, by period (from the
    file names `contribute` gives: consortium__site__asset__period__spec__key)."""
    wanted = (consortium.name, resolved.spec.name, resolved.hash[:12], settings.key().key_id)
    found: dict[str, set[str]] = {}
    for path in site_shares(Path(settings.inbox), consortium.sites):
        parts = path.name.removesuffix(".dpshare").split("__")
        if len(parts) == 6:
            name, site, asset, period, spec, key = parts
            if (name, asset, spec, key) == wanted:
                found.setdefault(period, set()).add(site)
    return found


def build_aggregator_definitions(settings: AggregatorSettings) -> dg.Definitions:
    """The aggregator's code location for `settings` (its spec decides the partitions)."""
    resolved = load_spec(settings.spec_file)
    partitioned = partitions(resolved)

    @dg.asset(
        name=SUM,
        partitions_def=partitioned,
        kinds={"dprelease"},
        description="The period's shares added under encryption; the ledger charged once.",
    )
    def consortium_sum(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        period = period_of(context.partition_key if context.has_partition_key else None)
        plan = settings.plan(period)
        shares = site_shares(Path(settings.inbox), plan.consortium.sites)
        mine = [p for p in shares if p.name.split("__")[2:4] == plan.release_id.split("/")]
        with Ledger(settings.ledger_url) as ledger:
            done = aggregate(
                plan,
                settings.key(),
                mine,
                ledger=ledger,
                budget=settings.budget(plan, ledger),
                out=Path(settings.work),
                allow_missing=settings.allow_missing,
            )
        return dg.MaterializeResult(
            metadata={
                "release_id": done.release_id,
                "sites contributed": ", ".join(done.sites),
                "sites missing": ", ".join(done.missing) or "none",
                "ledger": done.status,
                "encrypted sum (for the key holder)": dg.MetadataValue.path(str(done.sum_path)),
            }
        )

    @dg.asset(
        name=RELEASE,
        partitions_def=partitioned,
        deps=[consortium_sum],
        kinds={"dprelease"},
        description="The published consortium release, from the key holder's totals.",
    )
    def consortium_release(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        period = period_of(context.partition_key if context.has_partition_key else None)
        plan = settings.plan(period)
        summed = Path(settings.work) / sum_name(plan)
        totals = summed.with_suffix(".totals.json")
        out = Path(settings.out) / plan.release_id.replace("/", "__")
        with Ledger(settings.ledger_url) as ledger:
            done = publish(
                plan, summed, totals, ledger=ledger, budget=settings.budget(plan, ledger), out=out
            )
        contributed = json.loads(done.files["consortium.json"].read_text())
        return dg.MaterializeResult(
            metadata={
                "release_id": done.release_id,
                "status": done.status,
                "sites contributed": ", ".join(contributed["contributed"]),
                "sites missing": ", ".join(contributed["missing"]) or "none",
                "files": dg.MetadataValue.path(str(out)),
            }
        )

    @dg.sensor(asset_selection=[SUM], minimum_interval_seconds=60)
    def consortium_shares_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        """A sum for every period whose shares are all in the inbox (once per period)."""
        consortium = load_consortium(settings.consortium_file)
        shares = _shares_by_period(settings, consortium, resolved)
        requests = [
            dg.RunRequest(run_key=f"sum:{period}", partition_key=partition_of(period))
            for period, sites in sorted(shares.items())
            if sites == set(consortium.sites)
        ]
        return dg.SensorResult(run_requests=requests)

    @dg.sensor(asset_selection=[RELEASE], minimum_interval_seconds=60)
    def consortium_totals_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        """A release for every period whose sum has the key holder's totals next to it."""
        requests = []
        for totals in sorted(Path(settings.work).glob("*.totals.json")):
            period = totals.name.split("__")[2]
            requests.append(
                dg.RunRequest(run_key=f"release:{period}", partition_key=partition_of(period))
            )
        return dg.SensorResult(run_requests=requests)

    return dg.Definitions(
        assets=[consortium_sum, consortium_release],
        sensors=[consortium_shares_sensor, consortium_totals_sensor],
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_aggregator_definitions(AggregatorSettings.from_env())
