"""Tests of provision/checks/."""
