"""A site's Dagster code location: one asset, `consortium_share`, that writes this site's share
of each period's consortium release into its outbox (`dprelease consortium contribute`).

Settings (environment): DPRELEASE_CONSORTIUM_FILE (the consortium YAML),
DPRELEASE_CONSORTIUM_SPEC, DPRELEASE_CONSORTIUM_SITE (this site's name),
DPRELEASE_CONSORTIUM_DATA (the confidential input; `{period}` is replaced by the period),
DPRELEASE_CONSORTIUM_PUBLIC_KEY, DPRELEASE_CONSORTIUM_STORE (where shares are kept, so a re-run
resends them), DPRELEASE_CONSORTIUM_OUTBOX (this site's own outbox, which the consortium's
channel carries to the aggregator's inbox folder of this site, and nobody else reads),
DPRELEASE_CONSORTIUM_START (first month, YYYY-MM). The asset's metadata says only public facts:
the release, the share's path and size, whether it was drawn now or resent.
"""

from pathlib import Path

import dagster as dg

from dprelease.consortium import PublicKey, contribute, load_consortium, plan_release
from dprelease.spec import load_spec
from pipelines.consortium._common import partitions, period_of, required


class SiteSettings(dg.ConfigurableResource):
    """Where this site's inputs and outputs are (see the module docstring)."""

    consortium_file: str
    spec_file: str
    site: str
    data: str
    public_key: str
    store: str
    outbox: str

    @classmethod
    def from_env(cls) -> "SiteSettings":
        names = ("FILE", "SPEC", "SITE", "DATA", "PUBLIC_KEY", "STORE", "OUTBOX")
        values = [required(f"DPRELEASE_CONSORTIUM_{name}") for name in names]
        return cls(**dict(zip(cls.model_fields, values, strict=True)))


def build_site_definitions(settings: SiteSettings) -> dg.Definitions:
    """The site's code location for `settings` (its spec decides the partitions)."""
    resolved = load_spec(settings.spec_file)

    @dg.asset(
        name="consortium_share",
        partitions_def=partitions(resolved),
        kinds={"dprelease"},
        description="This site's encrypted share (exact aggregates + its noise share).",
    )
    def consortium_share(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        key = context.partition_key if context.has_partition_key else None
        period = period_of(key)
        plan = plan_release(load_consortium(settings.consortium_file), resolved, period)
        public = Path(settings.public_key)
        done = contribute(
            plan,
            settings.site,
            PublicKey.parse(public.read_bytes(), str(public)),
            settings.data.format(period=period or ""),
            store=Path(settings.store),
            out=Path(settings.outbox),
        )
        return dg.MaterializeResult(
            metadata={
                "release_id": plan.release_id,
                "site": settings.site,
                "share": dg.MetadataValue.path(str(done.out)),
                "bytes": done.size,
                "share drawn": "now" if done.status == "drawn" else "earlier (resent)",
            }
        )

    return dg.Definitions(assets=[consortium_share])


@dg.definitions
def defs() -> dg.Definitions:
    return build_site_definitions(SiteSettings.from_env())
