"""The strict pydantic base every spec section shares, and the names a spec may give."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator

from dprelease.errors import SpecError
from dprelease.files import ReadableErrors

#: Names a spec gives (release, statistics): ASCII letters, digits and '_', not starting with a
#: digit. Internal measurement names contain ':' (see `mechanism`), which this pattern forbids, so
#: no spec can name a column like them.
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
#: Field names of earlier versions, refused with a pointer to the new name.
RENAMED = {"target_ci95": "target_moe95", "ci95_columns": "moe95_columns"}

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class Strict(ReadableErrors):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Renamed(Strict):
    """Refuses a field of an earlier version by naming its successor (not a generic 'extra')."""

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for old, new in RENAMED.items():
                if old in data:
                    raise SpecError(old, f"{old!r} is now called {new!r}")
        return data
