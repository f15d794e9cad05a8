"""Tests of provision/facts/ (the folders beside are the facts' recorded cases)."""
