"""The Slurm executor: capacity units that an operator maps to a Slurm cluster run their
command jobs as `sbatch` jobs (docs/executors.md, Slurm).  Off unless QUOTAWEB_SLURM_UNITS
is set.  config.py reads the operator's map, commands.py calls Slurm's own commands,
submission.py claims and submits an attempt, states.py maps Slurm's job states to attempt
outcomes, backend.py is the Executor interface (start, stop, poll, logs, availability)."""
