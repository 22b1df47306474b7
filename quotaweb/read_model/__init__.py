"""The read model: how jobs, warm pools, usage samples and events are represented to
whoever reads them (the API, the websocket, the pages), each built in one place.

- jobs: the Job of docs/api.md, field by field; the websocket's summary and the pages'
  pending reason and position are fields of it.
- positions: queue positions (docs/semantics.md 4).
- pools: the WarmPool of docs/api.md; the websocket's live pools and the warm-pools
  page's rows take their fields from it.
- usage, events: samples and events.
- times: the one `iso`.

Billable warm-pool time is services.billing's (one computation, on
scheduler.lifecycle.billable_seconds).
"""
