"""Tests of provision/fleet/."""
