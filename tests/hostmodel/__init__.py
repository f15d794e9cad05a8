"""Tests of provision/hostmodel/, the simulated hosts' hardware model."""
