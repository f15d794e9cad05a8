"""Tests of provision/state/."""
