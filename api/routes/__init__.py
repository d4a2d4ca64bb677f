"""Routers of the `/v1` API, plus `/healthz` and `/metrics`."""
