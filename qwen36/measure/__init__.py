"""Measure a llama-server endpoint (``bench``, ``load``) and search for its best flags (``tune``)."""

from qwen36.measure.cli import register

__all__ = ["register"]
