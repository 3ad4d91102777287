"""Connectors: sources read from a service (a mailbox, a Prometheus server) by kind."""
