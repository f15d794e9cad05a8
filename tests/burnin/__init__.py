"""Tests of provision/burnin/."""
