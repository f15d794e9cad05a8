"""Tests of provision/triage/."""
