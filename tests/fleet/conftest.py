"""The bench tests' in-process CLI fixture, shared with the fleet's load test."""

from tests.measure.conftest import cli

__all__ = ["cli"]
