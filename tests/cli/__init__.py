"""Tests of provision/cli/."""
