"""pydantic's validation errors as users read them: the problems, without pydantic's links.

pydantic ends every problem in a ValidationError's text with ``For further information visit
https://errors.pydantic.dev/…``, a page about pydantic's own error codes that says nothing about
a release spec and doubles the length of the message. The models a user builds or validates
directly (a spec written in Python, a manifest read back) derive from `ReadableErrors`, so their
errors are still pydantic's `ValidationError` (the documented type, the same `errors()`), with
those lines left out. Files are reported differently anyway: `yaml_files.error_at_path` turns the
first problem into a typed error at its YAML path.
"""

from __future__ import annotations

from typing import Any, Self, get_args

from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

_PYDANTIC_ERROR_TYPES = frozenset(get_args(ErrorType))
_LINK = "For further information visit"


class ReadableValidationError(ValidationError):
    """A ValidationError printed without pydantic's documentation links."""

    def __str__(self) -> str:
        return "\n".join(
            line for line in super().__str__().splitlines() if not line.lstrip().startswith(_LINK)
        )


def _details(error: Any) -> InitErrorDetails:
    """One problem of `errors()` as it was raised: pydantic's own types by name, a validator's
    custom type (unknown to pydantic) with its message."""
    kind, context = error["type"], error.get("ctx")
    details: InitErrorDetails = {
        "type": kind
        if kind in _PYDANTIC_ERROR_TYPES
        else PydanticCustomError(kind, error["msg"], context),
        "loc": error["loc"],
        "input": error["input"],
    }
    if context is not None:
        details["ctx"] = context
    return details


def without_links(exc: ValidationError) -> ValidationError:
    """The same problems, printed without pydantic's links."""
    return ReadableValidationError.from_exception_data(
        exc.title, [_details(error) for error in exc.errors(include_url=False)]
    )


class ReadableErrors(BaseModel):
    """Base of the models users construct (`dp.ReleaseSpec(...)`) or validate themselves: a
    problem raises ValidationError without pydantic's links. Nested models are validated by
    their parent, so only the outermost call needs this."""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise without_links(exc) from None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            raise without_links(exc) from None
