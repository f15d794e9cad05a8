"""What other systems see, following the store: the Prometheus textfile (`metrics`, a reader), Slurm's node states
and reservations (`slurm`), and the rewrite of every sink the spec names after each run (`dispatch`).
"""
