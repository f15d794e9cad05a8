"""Tests of provision/node_check/."""
