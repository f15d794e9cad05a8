"""Tests of provision/report/."""
