"""``provision watch``: the admitted fleet kept under the one state machine after its burn-in. Each pass is a
recorded run of the lifecycle (command ``watch``); what it reads back from Slurm is ``reconcile``."""
