"""The Slurm executor: capacity units that an operator maps to a Slurm cluster run their
command jobs as `sbatch` jobs (docs/executors.md, Slurm).  Off unless QUOTAWEB_SLURM_UNITS
is set.  config.py reads the operator's map, commands.py calls Slurm's own commands,
states.py maps Slurm's job states to attempt outcomes, backend.py starts, stops and polls."""
