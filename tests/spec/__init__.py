"""Tests of provision/spec/."""
