"""GET /metrics: Quotaweb's state for Prometheus, in its text format (prometheus_client).

Every figure is read from the database when Prometheus scrapes, so any web process
answers with the same numbers, whichever process runs the cycle or the jobs.  Names follow
Kueue's where it has one (a quota share plays the part of a ClusterQueue: nominal quota,
resource usage, pending and admitted workloads, preempted workloads), and add what Kueue
lacks: borrowed, lent, own and warm instances, queued instances, warm-pool hits and
billable instance-seconds.

Who may scrape (settings.QUOTAWEB["METRICS_TOKEN"], ["METRICS_ALLOW"]): a request with
`Authorization: Bearer <METRICS_TOKEN>` when a token is set, or one without an
Authorization header from an address in the allow-list (loopback only by default; the
client's address as sign-in finds it, behind QUOTAWEB_PROXY_COUNT proxies).  A wrong token
gets 401 and anything else 403, without a body that says which figures exist.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable, Iterator

from django.conf import settings
from django.db.models import Count, F, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from scheduler.decisions import PendingReason
from scheduler.lifecycle import Outcome

from .models import (
    Attempt,
    CapacityLimit,
    CapacityUnit,
    CycleTotals,
    Job,
    QuotaShare,
    WarmPoolSegment,
)
from .models.jobs import ACTIVE_STATUSES, QUEUED_STATUSES
from .models.scheduler_state import CYCLE_BUCKETS
from .models.warm_pools import PoolStatus
from .scheduling import usage
from .services.billing import segment_billable_seconds
from .sign_in import client_address
from .web.usage_data import latest_figures

SHARE_UNIT = ("quota_share", "capacity_unit")
# metric name (after quotaweb_) → (usage figure, help)
USAGE_GAUGES = {
    "quota_share_nominal_quota": ("limit", "Instances the share may use without borrowing "
                                           "(Kueue: cluster_queue_nominal_quota)."),
    "quota_share_resource_usage": ("in_use", "Instances the share holds: its SCHEDULED, "
                                             "STARTING and RUNNING jobs and Available warm "
                                             "pools (Kueue: cluster_queue_resource_usage)."),
    "quota_share_own_instances": ("own", "Instances the share holds within its limit."),
    "quota_share_borrowed_instances": ("borrowed", "Instances the share holds above its limit."),
    "quota_share_lent_instances": ("lent", "Idle instances of the share's limit other shares "
                                           "use."),
    "quota_share_warm_instances": ("warm", "Instances of the share's Available warm pools."),
    "quota_share_queued_instances": ("queued", "Instances the share's waiting jobs ask for."),
}


def _labels(key: str) -> list[str]:
    share, unit = key.split("|", 1)
    return [share, unit]


class QuotawebCollector(Collector):
    """Reads the figures at each scrape (a fixed number of queries)."""

    def collect(self) -> Iterator[Metric]:
        yield from self._usage()
        yield from self._workloads()
        yield from self._capacity()
        yield from self._preemptions()
        yield from self._warm_pools()
        yield from self._fair_sharing()
        yield from self._past_borrowing()
        yield self._cycles()

    def _usage(self) -> Iterable[Metric]:
        """The same figures as the API's quota-share usage: the newest sample per series."""
        live = set(QuotaShare.live.values_list("name", flat=True))
        latest = {key: figures for key, figures in latest_figures().items()
                  if key.split("|", 1)[0] in live}
        for name, (figure, text) in USAGE_GAUGES.items():
            gauge = GaugeMetricFamily(f"quotaweb_{name}", text, labels=SHARE_UNIT)
            for key, figures in sorted(latest.items()):
                gauge.add_metric(_labels(key), figures[figure])
            yield gauge

    def _workloads(self) -> Iterable[Metric]:
        jobs = Job.objects.filter(quota_share__deleted_at__isnull=True)
        for name, statuses, text in (
            ("pending_workloads", QUEUED_STATUSES,
             "Jobs waiting for capacity, SUBMITTED or RUNNABLE (Kueue: pending_workloads)."),
            ("admitted_active_workloads", ACTIVE_STATUSES,
             "Jobs holding capacity, SCHEDULED, STARTING or RUNNING "
             "(Kueue: admitted_active_workloads)."),
        ):
            gauge = GaugeMetricFamily(f"quotaweb_{name}", text, labels=SHARE_UNIT)
            for share, unit, count in jobs.filter(status__in=statuses).values_list(
                    "quota_share__name", "instance_type").annotate(n=Count("id")).values_list(
                    "quota_share__name", "instance_type", "n").order_by(
                    "quota_share__name", "instance_type"):
                gauge.add_metric([share, unit], count)
            yield gauge

    def _capacity(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily("quotaweb_capacity_instances",
                                  "Instances of the capacity unit.", labels=["capacity_unit"])
        for unit, capacity in CapacityUnit.objects.order_by("name").values_list(
                "name", "max_capacity"):
            gauge.add_metric([unit], capacity)
        yield gauge

    def _preemptions(self) -> Iterable[Metric]:
        counter = CounterMetricFamily(
            "quotaweb_preempted_workloads",
            "Preempted attempts by the victim's share, the preemptor's share and the kind, "
            "CROSS_SHARE (a reclaim) or IN_SHARE (Kueue: preempted_workloads_total).",
            labels=["quota_share", "preempting_quota_share", "reason"])
        for share, by, kind, count in Attempt.objects.filter(outcome=Outcome.PREEMPTED).values_list(
                "job__quota_share__name", "preempted_by__quota_share__name", "kind").annotate(
                n=Count("id")).values_list("job__quota_share__name",
                                           "preempted_by__quota_share__name", "kind",
                                           "n").order_by("job__quota_share__name"):
            counter.add_metric([share, by or "", kind or ""], count)
        yield counter

    def _warm_pools(self) -> Iterable[Metric]:
        hits = CounterMetricFamily("quotaweb_warm_pool_hits",
                                   "Attempts started on a warm pool instead of a cold start.",
                                   labels=SHARE_UNIT)
        for share, unit, count in Attempt.objects.filter(warm_start=True).values_list(
                "job__quota_share__name", "job__instance_type").annotate(
                n=Count("id")).values_list("job__quota_share__name", "job__instance_type",
                                           "n").order_by("job__quota_share__name"):
            hits.add_metric([share, unit], count)
        yield hits
        billable = CounterMetricFamily(
            "quotaweb_warm_pool_billable_instance_seconds",
            "Billable warm-pool time: each segment's Available seconds × its instances, "
            "growing while a pool stands Available.", labels=SHARE_UNIT)
        totals: dict[tuple[str, str], float] = {}
        for share, unit, retained in WarmPoolSegment.objects.exclude(
                status=PoolStatus.AVAILABLE).values_list(
                "job__quota_share__name", "job__instance_type").annotate(
                total=Sum(F("retained_billable_seconds") * F("job__instance_count"))
                ).values_list("job__quota_share__name", "job__instance_type", "total"):
            totals[share, unit] = totals.get((share, unit), 0.0) + float(retained or 0)
        now = timezone.now()
        for segment in WarmPoolSegment.objects.filter(
                status=PoolStatus.AVAILABLE).select_related("job__quota_share"):
            key = (segment.job.quota_share.name, segment.job.instance_type)
            totals[key] = totals.get(key, 0.0) + segment_billable_seconds(
                segment, now) * segment.job.instance_count
        for key in sorted(totals):
            billable.add_metric(list(key), totals[key])
        yield billable

    def _past_borrowing(self) -> Iterable[Metric]:
        """docs/semantics.md 5.4: with a half-life, the half-life and each share's decayed
        past borrowing on the units where fair sharing is on."""
        half_life = usage.half_life_seconds()
        if not half_life:
            return  # without a half-life, /metrics is as it was
        fleet = bool(settings.QUOTAWEB.get("FAIR_SHARING", False))
        fair_units = {unit for unit, on in CapacityUnit.objects.values_list("name", "fair_sharing")
                      if fleet or on}
        yield GaugeMetricFamily(
            "quotaweb_fair_share_half_life_seconds",
            "Fair sharing's half-life for past borrowing (docs/semantics.md 5.4).",
            value=half_life)
        past = usage.past_borrowed_by_pair()
        decayed = GaugeMetricFamily(
            "quotaweb_quota_share_past_borrowed",
            "The share's decayed past borrowing on the unit, in instances (half-life "
            "weighted mean of its borrowed count), on units with fair sharing: it adds to "
            "borrowed before dividing by the weight.", labels=SHARE_UNIT)
        pairs = CapacityLimit.objects.filter(quota_share__deleted_at__isnull=True).values_list(
            "quota_share__name", "capacity_unit")
        for share, unit in sorted(pairs):
            if unit in fair_units:
                decayed.add_metric([share, unit], past.get((share, unit), 0.0))
        yield decayed

    def _fair_sharing(self) -> Iterable[Metric]:
        """docs/semantics.md 5.4 and 5.8: where fair sharing is on, each share's weight and
        the figure borrowers are ordered by, and who waits for a minimum runtime."""
        fleet = bool(settings.QUOTAWEB.get("FAIR_SHARING", False))
        switch = GaugeMetricFamily(
            "quotaweb_capacity_fair_sharing",
            "1 where borrowers take the unit's idle capacity by weight, 0 where first come, "
            "first served.", labels=["capacity_unit"])
        fair_units = set()
        for unit, on in CapacityUnit.objects.order_by("name").values_list("name", "fair_sharing"):
            switch.add_metric([unit], 1 if fleet or on else 0)
            if fleet or on:
                fair_units.add(unit)
        yield switch
        weight = GaugeMetricFamily("quotaweb_quota_share_fair_share_weight",
                                   "The share's weight in fair sharing of idle capacity.",
                                   labels=["quota_share"])
        minimum = GaugeMetricFamily(
            "quotaweb_quota_share_min_runtime_seconds",
            "How long the share's RUNNING jobs run before they may be preempted (0: at once).",
            labels=["quota_share"])
        weights = {}
        for name, share_weight, min_runtime in QuotaShare.live.order_by("name").values_list(
                "name", "fair_share_weight", "min_runtime_seconds"):
            weights[name] = share_weight
            weight.add_metric([name], share_weight)
            minimum.add_metric([name], min_runtime)
        yield weight
        yield minimum
        ratio = GaugeMetricFamily(
            "quotaweb_quota_share_borrowed_per_weight",
            "Borrowed instances divided by the share's weight, on units with fair sharing: "
            "idle capacity goes to the lowest first.", labels=SHARE_UNIT)
        for key, figures in sorted(latest_figures().items()):
            share, unit = _labels(key)
            if unit in fair_units and share in weights:
                ratio.add_metric([share, unit], figures["borrowed"] / weights[share])
        yield ratio
        waiting = GaugeMetricFamily(
            "quotaweb_min_runtime_waiting_workloads",
            "Jobs waiting only for lower-priority jobs of their share to reach their minimum "
            "runtime (pending reason WAITING_FOR_MIN_RUNTIME).", labels=SHARE_UNIT)
        for share, unit, count in Job.objects.filter(
                quota_share__deleted_at__isnull=True, status__in=QUEUED_STATUSES,
                pending_code=PendingReason.WAITING_FOR_MIN_RUNTIME.value).values_list(
                "quota_share__name", "instance_type").annotate(n=Count("id")).values_list(
                "quota_share__name", "instance_type", "n").order_by(
                "quota_share__name", "instance_type"):
            waiting.add_metric([share, unit], count)
        yield waiting

    def _cycles(self) -> Metric:
        """From CycleTotals, which each cycle updates as it is recorded: one row, so a
        scrape costs the same after a week of cycles as after the first."""
        totals = CycleTotals.objects.filter(id=1).first() or CycleTotals()
        at_most = list(totals.at_most) or [0] * len(CYCLE_BUCKETS)
        buckets = [(str(bound), count)
                   for bound, count in zip(CYCLE_BUCKETS, at_most, strict=True)]
        buckets.append(("+Inf", totals.count))
        return HistogramMetricFamily(
            "quotaweb_cycle_duration_seconds",
            "How long scheduling cycles took: load, plan and apply.", buckets=buckets,
            sum_value=totals.sum_ms / 1000)


def refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the request may scrape: it carries the metrics token, or carries no
    credentials and comes from an address in the allow-list (the client's address, found
    as for sign-in: behind QUOTAWEB_PROXY_COUNT proxies, the one the outermost saw, so a
    local proxy does not make every client loopback).  A wrong bearer token is 401 from
    any address: credentials that are sent are checked, never ignored."""
    token = settings.QUOTAWEB.get("METRICS_TOKEN")
    header = request.headers.get("Authorization")
    if header is not None:
        given = header[len("Bearer "):] if header.startswith("Bearer ") else ""
        if token and given and hmac.compare_digest(given.encode(), token.encode()):
            return None
        refused = HttpResponse("Unauthorized: that is not the metrics token.\n", status=401,
                               content_type="text/plain")
        refused["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return refused
    try:
        address = ipaddress.ip_address(client_address(request) or "")
    except ValueError:
        address = None
    if address is not None and any(
            address in ipaddress.ip_network(network, strict=False)
            for network in settings.QUOTAWEB.get("METRICS_ALLOW", [])):
        return None
    return HttpResponse("Forbidden: /metrics needs the metrics token or an allowed "
                        "address.\n", status=403, content_type="text/plain")


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    refused = refusal(request)
    if refused is not None:
        return refused
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QuotawebCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
