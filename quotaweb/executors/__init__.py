"""Executors run jobs' attempts, each kind behind one interface (base.py), looked up by the
job's executor kind (backends.py): `simulated` plays a job's duration_seconds out by the
engine's pure lifecycle; `local` runs its command in a sandbox under a supervisor."""
