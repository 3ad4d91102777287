"""Unified Knowledge API: one question, every source, grounded answers."""

__version__ = "1.0.0"
