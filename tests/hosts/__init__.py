"""Tests of provision/hosts/."""
