"""The Django admin: the administrator's view of every table.

Nothing here writes around quotaweb.services.  Capacity units and quota shares (with their
limits inline) validate through services.configuration in their forms and are saved by its
functions, so an invalid configuration shows the field's error and saves nothing; jobs are
read-only except their priority (saved by update_priority) and the "Terminate selected
jobs" action; what the engine writes (attempts, warm pools, events, usage, cycle records)
is read-only.
"""

from . import configuration, jobs, records  # noqa: F401  (each registers its admins)
