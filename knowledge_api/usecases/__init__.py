"""Use cases: what the service is for, one module each, on one floor above the
service and below the entry points (routes, CLI, the in-process sidecar API)."""
