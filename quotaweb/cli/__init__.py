"""`quotaweb`: the command line over the Python client (quotaweb.client).

    quotaweb submit --share QS1 --name train --priority 3 --duration 600
    quotaweb jobs --share QS1 --status RUNNING --status RUNNABLE
    quotaweb wait 12 --until RUNNING,SUCCEEDED --timeout 300
    quotaweb logs 12 -f

The server and the token come from QUOTAWEB_URL and QUOTAWEB_TOKEN (--url and --token
override them).  Output is a table for people, or the API's JSON with --json.  Exit
status: 0 done, 1 the API refused (its message on stderr) or a wait did not end as asked,
2 a usage error.
"""

from __future__ import annotations

from .commands import main
from .output import Progress, describe_text, job_line, jobs_table

__all__ = ["Progress", "describe_text", "job_line", "jobs_table", "main"]
