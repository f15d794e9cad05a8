"""``provision triage``: which node killed a failed job. The logs' failure signatures (``signals``) and the
culprits they point at (``verdict``); reading only: it changes no host, no switch and no Slurm state."""
