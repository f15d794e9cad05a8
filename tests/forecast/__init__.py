"""Tests of provision/forecast/."""
