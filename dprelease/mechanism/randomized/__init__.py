"""Randomized response: the local-DP randomizers (k-RR, OUE, OLH), their exact sampling and the
estimators that de-bias counts of their reports.

    randomizer = make_randomizer(domain, epsilon)      # the protocol the variance rule picks
    reports = randomizer.randomize_all(answers, ByteStream(byte_reader(source)))
    law = law_of(randomizer)                           # p and q: when a report supports v
    estimate = debias(support, respondents, law)       # (C − n·q)/(p − q), unbiased

A room of `mechanism/` beside `noise/`: the randomizers run on the respondent's device (the
JavaScript module `dprelease/local/randomize.js` runs the same algorithms byte for byte), and a
release reads their reports through the row plan (`engines.Reported`) and de-biases them
(`kinds.randomized`), spending nothing: PRIVACY.md, "Local DP".
"""

from dprelease.mechanism.randomized._estimators import (
    Z95,
    Law,
    collision,
    debias,
    law_of,
    plug_in_variance,
    project,
    variance,
    worst_variance,
)
from dprelease.mechanism.randomized._exact import ByteStream, byte_reader
from dprelease.mechanism.randomized._randomizers import (
    MAX_DOMAIN,
    MECHANISMS,
    PRIME,
    RANDOMIZER_VERSION,
    Answer,
    Mechanism,
    Randomizer,
    Report,
    choose_mechanism,
    make_randomizer,
    olh_hash,
)

__all__ = [
    "MAX_DOMAIN",
    "MECHANISMS",
    "PRIME",
    "RANDOMIZER_VERSION",
    "Z95",
    "Answer",
    "ByteStream",
    "Law",
    "Mechanism",
    "Randomizer",
    "Report",
    "byte_reader",
    "choose_mechanism",
    "collision",
    "debias",
    "law_of",
    "make_randomizer",
    "olh_hash",
    "plug_in_variance",
    "project",
    "variance",
    "worst_variance",
]
