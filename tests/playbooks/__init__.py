"""Tests of playbooks/ and its modules."""
