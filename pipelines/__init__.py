"""Dagster code location for dprelease: thin wiring over the library."""
