"""How a release is computed: accounting, exact noise, engines, margins, post-processing."""
