"""Prune stage (placeholder docstring, filled below)."""
