"""Exactly uniform integers from a noise source, for post-processing that randomizes (the
unbiased rounding to a base of `dprelease.publication`): the same CSPRNG and rejection as the
samplers, never numpy's default generator, so a seeded test source reproduces them too."""

from __future__ import annotations

import numpy as np

from dprelease.mechanism.noise._source import (
    NoiseSource,
    _BitStream,
    _check_source,
    _python_uniform_below,
    _uniform_below,
)


class UniformIntegers:
    """Uniform integers below any m ≥ 1, one at a time or in arrays, from one stream of a
    source (the zero test source gives 0 every time)."""

    def __init__(self, source: NoiseSource | None) -> None:
        opened = _check_source(source)._open_stream
        self._stream = None if opened is None else _BitStream(opened())

    def below(self, m: int) -> int:
        """One integer uniform in [0, m)."""
        if m < 1:
            raise ValueError(f"m must be at least 1, got {m}")
        return 0 if self._stream is None else _python_uniform_below(self._stream, m)

    def array_below(self, m: int, n: int) -> np.ndarray:
        """n independent integers uniform in [0, m), as int64 (m ≤ 2^63)."""
        if not 1 <= m <= 2**63:
            raise ValueError(f"m must be in [1, 2^63], got {m}")
        if self._stream is None or n == 0:
            return np.zeros(n, dtype=np.int64)
        return _uniform_below(self._stream, m, n).astype(np.int64)
