"""Dagster code locations of a consortium release (docs/consortium.md), separate from the main
one, which never imports them: `site.py` for each site (its share, each period) and
`aggregator.py` for the aggregator (the sum once every share is in, then the release once the
key holder's totals are). Both only wire `dprelease.consortium`; they decide nothing."""
