"""The InfiniBand fabric model: pure, fast, no I/O beyond the files it is given."""
