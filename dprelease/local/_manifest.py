"""What a release of randomized answers states about itself (`manifest.json`, format
"dprelease-local-manifest/1").

Its numbers come from the wave's public parameters and the released table's structure; the one
count it states about the data, per row, is in the table itself (`respondents`), published as the
spec's `public_columns` declares. It says what the local mechanism protects and what it does not,
and that this release spent nothing: its ε was spent when the answers were given.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import AwareDatetime, ConfigDict, Field

from dprelease.files import ReadableErrors

LOCAL_MANIFEST_FORMAT: Final = "dprelease-local-manifest/1"


class _Model(ReadableErrors):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WaveEntry(_Model):
    """The wave the answers were collected in: what every respondent's device did."""

    id: str
    question: str = Field(description="the column of randomized answers")
    domain: list[str] | list[int] | list[bool]
    mechanism: Literal["krr", "oue", "olh"]
    epsilon: float
    epsilon_exact: str
    g: int | None = Field(description="OLH: the buckets; None for k-RR and OUE")
    randomizer_version: str
    scope: str
    wave_hash: str


class SupportEntry(_Model):
    """How likely a report supports an answer: p for the respondent's own, q for any other."""

    p: float
    q: float
    collision: float | None = Field(
        default=None, description="OLH: P(two answers share a bucket), exact over the hash family"
    )
    support: str = Field(description="when a report supports an answer")


class WaveCharge(_Model):
    """The ledger charge the wave's ε was spent under (when its answers were given)."""

    recorded: Literal[True] = True
    scope: str
    charge_id: int
    wave_release_id: str


class NotRecordedWave(_Model):
    recorded: Literal[False] = False
    note: str = (
        "no ledger was given: the wave's charge was not checked, so this exploration must not "
        "be published"
    )


class GroupEntry(_Model):
    columns: list[str]
    keys: int
    domain: Literal["values", "range", "file"]


class LevelEntry(_Model):
    level: str
    columns: list[str]
    rows: int


class LocalManifest(_Model):
    """A release of a wave's randomized answers."""

    format: Literal["dprelease-local-manifest/1"] = LOCAL_MANIFEST_FORMAT
    release: str
    source: str
    spec_hash: str
    created_at: AwareDatetime
    library_version: str
    engine: str
    model: Literal["local"] = "local"
    mechanism: str = Field(
        description="as a central manifest's: here the randomizer each device ran (krr, oue, olh)"
    )
    neighbours: Literal["answer"] = Field(
        default="answer",
        description="as a central manifest's: one respondent's answer changes, who answered is "
        "public (the terms the wave's scope keeps)",
    )
    privacy_unit: str = "each respondent's report (one row)"
    guarantee: str
    not_protected: str
    wave: WaveEntry
    charged: Literal[False] = False
    budget: str
    wave_charge: WaveCharge | NotRecordedWave
    support: SupportEntry
    estimator: str
    variance: str
    margin_of_error: str
    projection: str | None = Field(description="None: the unbiased estimates as they are")
    shares: bool
    group_by: list[GroupEntry]
    public_columns: list[str]
    cells: int
    levels: list[LevelEntry] | None = None
    columns: dict[str, str] = Field(description="every column of the released table, in words")
    missing: str
    out_of_domain: str

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
