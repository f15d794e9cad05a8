"""Tests of provision/sinks/."""
