"""Tests of bench/, the benchmarks."""
