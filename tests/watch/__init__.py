"""Tests of provision/watch/."""
