"""The consortium's typed refusals: each names the file or field and says what to change."""

from __future__ import annotations

from dprelease.errors import ConfigError, DPReleaseError


class ConsortiumError(ConfigError):
    """The consortium's configuration, or a release's public parameters, cannot be used."""


class ShareError(DPReleaseError, ValueError):
    """A consortium file (a key, a share, a sum, noisy totals) is refused: `name` is its path."""

    def __init__(self, name: str, message: str) -> None:
        self.name = name
        self.message = message
        super().__init__(f"{name}: {message}" if name else message)
