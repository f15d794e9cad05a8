"""Tests of provision/run/."""
