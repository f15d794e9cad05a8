"""Tests of provision/sim/, the simulated cluster."""
