"""Tests of fabric_tests/, the burn-in's programs on the nodes."""
