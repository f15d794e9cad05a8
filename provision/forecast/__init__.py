"""Forecasts: how long until a component's error counter reaches the spec's threshold, from series that reset and
jump (``model``); measured against a threshold alarm by ``python -m bench.forecast``."""
