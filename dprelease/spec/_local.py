"""A local spec file's release as a central release spec.

A local spec file (docs/local.md) holds a `wave:` (one question asked under local DP, recorded in
the ledger by `dprelease local wave`) and the `release:` of its randomized answers. That release
is a central release spec whose one statistic is the wave's answers (`kind: randomized`, named
after the question, with the wave's public parameters), in the wave's budget scope: it goes
through the one release path and states the central manifest.

    wave: {id: diabetes-1976, question: diabetes, domain: [0, 1], epsilon: 1, scope: nhanes}
    release:
      name: diabetes_by_region
      source: diabetes_reports
      group_by: [{column: region, domain: {values: [1, 2, 3, 4]}}]
      public_columns: [region]      # the statistic's fields: public_columns, project, shares,
                                    # hash_column; everything else is the release spec's
"""

from __future__ import annotations

from typing import Any

from dprelease.errors import SpecError

__all__ = ["ANSWER_FIELDS", "WAVE_FIELDS", "local_path", "local_release"]

#: The wave's fields its randomized statistic repeats (the questionnaire's public parameters).
WAVE_FIELDS = ("domain", "epsilon", "mechanism", "compact", "g")
#: The release section's fields that are the randomized statistic's.
ANSWER_FIELDS = ("public_columns", "project", "shares", "hash_column")


def local_release(
    wave: Any, release: Any, publish: Any, prefix: str = ""
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `release:` and `publish:` mappings of the central spec a local spec file's `wave:`
    and `release:` (and optional `publish:`, whose scope is the wave's) stand for."""
    if not isinstance(wave, dict):
        raise SpecError(prefix + "wave", "must be a mapping (id, question, domain, epsilon, scope)")
    if not isinstance(release, dict):
        raise SpecError(prefix + "release", "must be a mapping (name, source, group_by, ...)")
    if "statistics" in release:
        raise SpecError(
            prefix + "release.statistics",
            "a local spec file releases its wave's answers, one statistic named after the "
            "question: remove statistics (release other statistics in a spec file of their own)",
        )
    question = wave.get("question")
    statistic = {
        "name": question,
        "kind": "randomized",
        "column": question,
        "wave": wave.get("id"),
        **{key: wave[key] for key in WAVE_FIELDS if key in wave},
        **{key: release[key] for key in ANSWER_FIELDS if key in release},
    }
    central = {key: value for key, value in release.items() if key not in ANSWER_FIELDS}
    central["statistics"] = [statistic]
    stated = dict(publish) if isinstance(publish, dict) else {}
    scope = wave.get("scope")
    if not (isinstance(scope, str) and scope):
        raise SpecError(
            prefix + "wave.scope",
            "give the budget scope of the people asked (the wave's ε is charged there, and its "
            "answers are released in it)",
        )
    if stated.get("scope", scope) != scope:
        raise SpecError(
            prefix + "publish.scope",
            f"the wave's answers are released in its scope {scope!r}: remove publish.scope",
        )
    return central, {"share": 1, **stated, "scope": scope}


def local_path(path: str, prefix: str = "") -> str:
    """Where the user wrote what an error names: the statistic's fields that repeat the wave's
    at `wave.…`, the release section's at `release.…`."""
    statistic = f"{prefix}release.statistics[0]"
    if not path.startswith(statistic):
        return path
    rest = path[len(statistic) :].lstrip(".")
    field = rest.split(".", 1)[0].split("[", 1)[0]
    renamed = {"column": "question", "name": "question", "wave": "id"}
    if field in WAVE_FIELDS or field in renamed:
        return f"{prefix}wave.{renamed.get(field, field)}" + rest[len(field) :]
    if field in ANSWER_FIELDS:
        return f"{prefix}release.{rest}"
    return f"{prefix}release"
