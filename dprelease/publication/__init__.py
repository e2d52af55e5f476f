"""WHAT IS PUBLISHED, for its readers: a drawn release written in their formats. `publish/` is
the path a release takes (when, whether, charged where); this is what its table looks like once
out.

    csv_bytes(table)        # integral values as integers

Everything here is a function of the released table (and the manifest): it depends on the data
only through the noisy values.
"""

from dprelease.publication._formats import csv_bytes, integral_as_integers, stored_csv

__all__ = ["csv_bytes", "integral_as_integers", "stored_csv"]
