"""The dashboard's routes (namespace "web")."""

from django.urls import path

from .views import jobs, overview, pools, reports, search, shares, tokens, what_if

app_name = "web"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("fleet", overview.fleet, name="fleet"),
    path("fleet/figure.json", overview.fleet_figure, name="fleet-figure"),
    path("shares/<str:name>", shares.share_detail, name="share"),
    path("shares/<str:name>/jobs", shares.share_jobs, name="share-jobs"),
    path("jobs", search.jobs, name="jobs"),
    path("events", search.events, name="events"),
    path("jobs/<int:job_id>", jobs.job_detail, name="job"),
    path("jobs/<int:job_id>/status", jobs.job_status, name="job-status"),
    path("jobs/<int:job_id>/log-tail", jobs.job_log_tail, name="job-log-tail"),
    path("jobs/<int:job_id>/actions", jobs.job_actions, name="job-actions"),
    path("jobs/<int:job_id>/priority", jobs.change_priority, name="job-priority"),
    path("jobs/<int:job_id>/terminate", jobs.terminate, name="job-terminate"),
    path("jobs/<int:job_id>/keep-alive", jobs.change_keep_alive, name="job-keep-alive"),
    path("submit", jobs.submit, name="submit"),
    path("reports/usage", reports.usage, name="report"),
    path("reports/usage.csv", reports.usage_csv, name="report-csv"),
    path("what-if", what_if.what_if_page, name="what-if"),
    path("warm-pools", pools.warm_pools, name="warm-pools"),
    path("warm-pools/table", pools.warm_pools_table, name="warm-pools-table"),
    path("warm-pools/<int:pool_id>/keep-alive", pools.pool_keep_alive,
         name="pool-keep-alive"),
    path("capacity", pools.capacity, name="capacity"),
    path("capacity/units", pools.capacity_unit, name="capacity-add"),
    path("capacity/units/<int:unit_id>", pools.capacity_unit, name="capacity-unit"),
    path("capacity/units/<int:unit_id>/delete", pools.delete_capacity_unit,
         name="capacity-delete"),
    path("tokens", tokens.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke", tokens.revoke_token, name="token-revoke"),
    path("tokens/revoke-all", tokens.revoke_all_tokens, name="tokens-revoke-all"),
    path("live/fleet-glance", overview.fleet_glance, name="fleet-glance"),
    path("live/share-cards", overview.share_cards, name="share-cards"),
    path("live/open-jobs", overview.open_jobs, name="open-jobs"),
    path("live/usage", overview.usage_after, name="usage-after"),
    path("live/stopping", overview.stopping, name="stopping"),
]
