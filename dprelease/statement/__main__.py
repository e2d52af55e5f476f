"""`python -m dprelease.statement > docs/manifest.schema.json`: the manifest's JSON Schema."""

import sys

from dprelease.statement import json_schema

sys.stdout.write(json_schema())
