"""Tests of provision/network/."""
