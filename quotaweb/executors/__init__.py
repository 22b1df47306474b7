"""Executors run jobs' attempts: `simulated` advances a job's duration_seconds by the
engine's pure lifecycle; `local` runs its command as a subprocess under a supervisor."""
