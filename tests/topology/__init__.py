"""Tests of topology/."""
