"""The dashboard's figure builders (quotaweb/web/figures.py) and series helpers: pure
functions from plain data to Plotly figure dicts, tested without a browser or a database.

Every figure is also checked against plotly's own schema (plotly.graph_objects validates
every attribute), so a typo in an attribute name fails here, not in a browser."""

from __future__ import annotations

import ast
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import pytest

from quotaweb import series
from quotaweb.read_model import times
from quotaweb.web import figures, gantt
from quotaweb.web.figures import OKABE_ITO

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
UNIT = "ml.g5.xlarge"


def at(minutes_ago: float) -> str:
    return series.iso(NOW - timedelta(minutes=minutes_ago))


def sample(share: str, minutes_ago: float, *, own: int = 0, borrowed: int = 0, lent: int = 0,
           limit: int = 1, unit: str = UNIT, id: int = 0) -> dict[str, Any]:
    return {"id": id, "time": at(minutes_ago), "quota_share": share, "capacity_unit": unit,
            "limit": limit, "in_use": own + borrowed, "own": own, "borrowed": borrowed,
            "lent": lent, "warm": 0, "queued": 0}


def row(share: str, limit: int = 1, unit: str = UNIT) -> dict[str, Any]:
    return {"quota_share": share, "capacity_unit": unit, "limit": limit}


def valid(figure: dict[str, Any]) -> dict[str, Any]:
    """The figure is JSON and plotly's schema accepts every attribute."""
    json.dumps(figure)
    go.Figure(data=figure["data"], layout=figure["layout"])
    return figure


def traces_of(figure: dict[str, Any], key: str) -> dict[str, dict[str, Any]]:
    """field or marker kind → trace, for one series."""
    found = {}
    for trace in figure["data"]:
        meta = trace["meta"]
        if meta.get("series") == key:
            found[meta.get("field") or meta.get("markers") or "stopping"] = trace
    return found


# Colours --------------------------------------------------------------------------------


def test_share_colours_follow_share_name_order_whatever_the_input_order() -> None:
    assert figures.share_colours(["QS3", "QS1", "QS2", "QS1"]) == {
        "QS1": OKABE_ITO[0], "QS2": OKABE_ITO[1], "QS3": OKABE_ITO[2]}


def test_share_colours_cycle_after_the_palette() -> None:
    names = [f"S{i:02d}" for i in range(len(OKABE_ITO) + 2)]
    colours = figures.share_colours(names)
    assert colours["S00"] == colours[f"S{len(OKABE_ITO):02d}"] == OKABE_ITO[0]


def test_the_palette_is_okabe_ito() -> None:
    assert set(OKABE_ITO) <= {"#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2",
                              "#D55E00", "#CC79A7", "#000000"}


# Timelines ------------------------------------------------------------------------------


def build(rows: list[dict[str, Any]], samples: list[dict[str, Any]],
          markers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    colours = figures.share_colours(r["quota_share"] for r in rows)
    return valid(figures.timeline_figure(rows, samples, markers or [], colours=colours,
                                         now=NOW))


def test_each_share_and_unit_gets_own_borrowed_lent_limit_stopping_and_marker_traces(
) -> None:
    figure = build([row("QS1"), row("QS2")], [sample("QS1", 10, own=1)])
    for share in ("QS1", "QS2"):
        traces = traces_of(figure, f"{share}|{UNIT}")
        assert list(traces) == ["own", "borrowed", "lent", "limit", "stopping",
                                "CROSS_SHARE", "IN_SHARE", "RECLAIM_RETURNED"]
    assert len(figure["data"]) == 16


def test_own_borrowed_and_lent_are_stacked_areas_and_the_limit_a_dashed_line() -> None:
    traces = traces_of(build([row("QS1")], [sample("QS1", 5, own=1, borrowed=1)]),
                       f"QS1|{UNIT}")
    groups = {traces[field]["stackgroup"] for field in ("own", "borrowed", "lent")}
    assert groups == {f"QS1|{UNIT}"}
    assert "stackgroup" not in traces["limit"]
    assert traces["limit"]["line"]["dash"] == "dash"
    assert traces["borrowed"]["fillpattern"]["shape"] == "/"
    assert traces["lent"]["fillpattern"]["shape"] == "."
    assert all(trace["line"]["shape"] == "hv" for field, trace in traces.items()
               if field in ("own", "borrowed", "lent", "limit"))


def test_a_share_has_its_colour_on_its_row() -> None:
    figure = build([row("QS2"), row("QS1")], [sample("QS1", 5, own=1), sample("QS2", 5)])
    assert OKABE_ITO[0].lstrip("#") in _rgb_hex(traces_of(figure, f"QS1|{UNIT}")["own"])
    assert OKABE_ITO[1].lstrip("#") in _rgb_hex(traces_of(figure, f"QS2|{UNIT}")["own"])


def _rgb_hex(trace: dict[str, Any]) -> str:
    red, green, blue = trace["fillcolor"][5:].split(",")[:3]
    return f"{int(red):02X}{int(green):02X}{int(blue):02X}"


def test_samples_become_steps_ending_in_a_tail_at_now() -> None:
    samples = [sample("QS1", 20, own=1, id=1), sample("QS1", 10, own=1, borrowed=1, id=2)]
    traces = traces_of(build([row("QS1")], samples), f"QS1|{UNIT}")
    assert traces["own"]["x"] == [at(20), at(10), series.iso(NOW)]
    assert traces["own"]["y"] == [1, 1, 1]
    assert traces["borrowed"]["y"] == [0, 1, 1]
    assert traces["limit"]["y"] == [1, 1, 1]
    assert traces["own"]["meta"] == {"series": f"QS1|{UNIT}", "field": "own", "tail": True}


def test_samples_are_ordered_by_time_whatever_the_input_order() -> None:
    samples = [sample("QS1", 5, own=1, id=2), sample("QS1", 15, own=0, id=1)]
    traces = traces_of(build([row("QS1")], samples), f"QS1|{UNIT}")
    assert traces["own"]["x"][:2] == [at(15), at(5)]
    assert traces["own"]["y"][:2] == [0, 1]


def test_no_tail_when_the_last_sample_is_now() -> None:
    traces = traces_of(build([row("QS1")], [sample("QS1", 0, own=1)]), f"QS1|{UNIT}")
    assert traces["own"]["x"] == [series.iso(NOW)]


def test_samples_of_shares_without_a_row_are_left_out() -> None:
    figure = build([row("QS1")], [sample("QS1", 5), sample("GONE", 5, own=3)])
    assert not traces_of(figure, f"GONE|{UNIT}")


def test_a_row_without_samples_draws_its_limit_and_says_what_to_do() -> None:
    figure = build([row("QS1", limit=2)], [])
    traces = traces_of(figure, f"QS1|{UNIT}")
    assert traces["own"]["x"] == [] and traces["own"]["y"] == []
    assert traces["limit"]["y"] == [2, 2]
    assert traces["limit"]["x"][-1] == series.iso(NOW)
    empty = [note for note in figure["layout"]["annotations"]
             if note.get("name") == f"empty:QS1|{UNIT}"]
    assert len(empty) == 1 and "jobs submitted to QS1" in empty[0]["text"]


def test_preemptions_are_markers_on_the_victims_row_naming_who_preempted_whom() -> None:
    markers = [
        {"time": at(3), "quota_share": "QS1", "capacity_unit": UNIT, "kind": "CROSS_SHARE",
         "job_name": "qs1_job_med", "preempted_by_name": "qs2_job_1"},
        {"time": at(1), "quota_share": "QS1", "capacity_unit": UNIT, "kind": "IN_SHARE",
         "job_name": "qs1_job_high", "preempted_by_name": "qs1_job_low"},
    ]
    figure = build([row("QS1"), row("QS2")], [sample("QS1", 5)], markers)
    qs1 = traces_of(figure, f"QS1|{UNIT}")
    assert qs1["CROSS_SHARE"]["x"] == [at(3)]
    assert qs1["CROSS_SHARE"]["customdata"] == [["qs1_job_med", "qs2_job_1", "CROSS_SHARE"]]
    assert qs1["IN_SHARE"]["customdata"] == [["qs1_job_high", "qs1_job_low", "IN_SHARE"]]
    assert qs1["CROSS_SHARE"]["marker"]["symbol"] != qs1["IN_SHARE"]["marker"]["symbol"]
    assert "preempted" in qs1["CROSS_SHARE"]["hovertemplate"]
    qs2 = traces_of(figure, f"QS2|{UNIT}")
    assert qs2["CROSS_SHARE"]["x"] == [] and qs2["IN_SHARE"]["x"] == []


def test_markers_sit_on_a_hidden_strip_axis_over_their_row() -> None:
    figure = build([row("QS1"), row("QS2")], [])
    qs2 = traces_of(figure, f"QS2|{UNIT}")
    strip = qs2["CROSS_SHARE"]["yaxis"]  # y4: the strip over row 2 (y2)
    assert strip == "y4"
    axis = figure["layout"]["yaxis4"]
    assert axis["overlaying"] == "y2" and axis["visible"] is False and axis["range"] == [0, 1]
    assert qs2["own"]["yaxis"] == "y2"


def test_rows_share_one_time_axis_showing_the_last_thirty_minutes() -> None:
    figure = build([row("QS1"), row("QS2")], [sample("QS1", 90, own=1)])
    layout = figure["layout"]
    assert {trace["xaxis"] for trace in figure["data"]} == {"x"}
    assert layout["xaxis"]["type"] == "date"
    assert layout["xaxis"]["range"] == [at(30), series.iso(NOW)]
    assert layout["meta"]["time_axes"] == ["xaxis"]
    assert layout["meta"]["window_seconds"] == 1800
    top, bottom = layout["yaxis"]["domain"], layout["yaxis2"]["domain"]
    assert top[0] > bottom[1]  # the first row is above the second


def test_a_young_history_is_not_squeezed_into_the_right_edge() -> None:
    figure = build([row("QS1")], [sample("QS1", 8, own=1)])
    assert figure["layout"]["xaxis"]["range"][0] == at(8.25)  # 15 s before the data
    figure = build([row("QS1")], [sample("QS1", 0.5, own=1)])
    assert figure["layout"]["xaxis"]["range"][0] == at(1)  # at least a minute


def test_the_legend_shows_each_encoding_once() -> None:
    figure = build([row("QS1"), row("QS2")], [])
    shown = [trace["name"] for trace in figure["data"] if trace["showlegend"]]
    assert shown == ["own", "borrowed", "lent to others", "limit", "stopping (grace period)",
                     "reclaim (cross-share)", "in-share preemption",
                     "reclaim (capacity came back)"]


def test_a_victims_grace_period_is_a_stopping_segment_on_its_row() -> None:
    stops = [{"quota_share": "QS1", "capacity_unit": UNIT, "since": at(3), "until": at(2.5),
              "job_name": "qs1_job_high", "preempted_by_name": "qs1_job_low"}]
    colours = figures.share_colours(["QS1", "QS2"])
    figure = valid(figures.timeline_figure([row("QS1"), row("QS2")], [], [], colours=colours,
                                           now=NOW, stops=stops))
    stopping = traces_of(figure, f"QS1|{UNIT}")["stopping"]
    assert stopping["x"] == [at(3), at(2.5), None]
    assert stopping["customdata"][0] == ["qs1_job_high", "qs1_job_low", at(2.5)]
    assert stopping["yaxis"] == traces_of(figure, f"QS1|{UNIT}")["IN_SHARE"]["yaxis"]
    assert traces_of(figure, f"QS2|{UNIT}")["stopping"]["x"] == []


def test_a_reclaim_returned_marker_sits_on_the_lenders_row() -> None:
    markers = [{"time": at(4), "quota_share": "QS2", "capacity_unit": UNIT,
                "kind": "RECLAIM_RETURNED", "job_name": "qs1_job_med",
                "preempted_by_name": "qs2_job_1"}]
    figure = build([row("QS1"), row("QS2")], [], markers)
    returned = traces_of(figure, f"QS2|{UNIT}")["RECLAIM_RETURNED"]
    assert returned["x"] == [at(4)] and returned["marker"]["symbol"] == "triangle-up"
    assert returned["customdata"] == [["qs1_job_med", "qs2_job_1",
                                       "CROSS_SHARE: capacity came back"]]
    assert traces_of(figure, f"QS1|{UNIT}")["RECLAIM_RETURNED"]["x"] == []


def test_a_marks_legend_entry_is_on_the_first_row_that_draws_it() -> None:
    markers = [{"time": at(4), "quota_share": "QS2", "capacity_unit": UNIT,
                "kind": "RECLAIM_RETURNED", "job_name": "a", "preempted_by_name": "b"}]
    figure = build([row("QS1"), row("QS2")], [], markers)
    shown = [(t["meta"]["series"], t["name"]) for t in figure["data"]
             if t["showlegend"] and t["meta"].get("markers")]
    assert shown == [(f"QS1|{UNIT}", "reclaim (cross-share)"),
                     (f"QS1|{UNIT}", "in-share preemption"),
                     (f"QS2|{UNIT}", "reclaim (capacity came back)")]


def test_a_timeline_without_shares_is_still_a_valid_figure() -> None:
    figure = build([], [])
    assert figure["data"] == []


# The fleet Gantt -----------------------------------------------------------------------


def bar(share: str, instance: int, start: float, end: float | None, *, kind: str = "run",
        borrowed: int = 0, unit: str = UNIT, job: str = "job") -> dict[str, Any]:
    return {"capacity_unit": unit, "instance": instance, "quota_share": share, "kind": kind,
            "start": at(start), "end": at(end) if end is not None else None, "job_id": 1,
            "job_name": job, "attempt": 1, "outcome": None, "borrowed_instances": borrowed,
            "instance_count": 1, "warm_start": False}


def fleet(units: list[dict[str, Any]], bars: list[dict[str, Any]]) -> dict[str, Any]:
    colours = figures.share_colours(b["quota_share"] for b in bars)
    return valid(gantt.fleet_figure(units, bars, colours=colours, now=NOW))


def test_one_row_per_instance_number_per_unit() -> None:
    units = [{"name": "b.unit", "max_capacity": 2}, {"name": "a.unit", "max_capacity": 1}]
    assert gantt.fleet_rows(units, []) == ["a.unit #0", "b.unit #0", "b.unit #1"]


def test_instances_beyond_a_shrunk_capacity_keep_their_rows() -> None:
    rows = gantt.fleet_rows([{"name": UNIT, "max_capacity": 1}], [bar("QS1", 4, 10, 5)])
    assert rows == [f"{UNIT} #0", f"{UNIT} #4"]


def test_bars_are_coloured_by_share_and_borrowed_ones_hatched() -> None:
    figure = fleet([{"name": UNIT, "max_capacity": 3}],
                   [bar("QS2", 1, 20, 10), bar("QS1", 0, 30, 20),
                    bar("QS1", 2, 15, None, borrowed=1)])
    names = [trace["name"] for trace in figure["data"]]
    assert names == ["QS1", "QS2"]
    qs1 = figure["data"][0]
    assert qs1["orientation"] == "h" and qs1["base"] == [at(30), at(15)]
    assert qs1["y"] == [f"{UNIT} #0", f"{UNIT} #2"]
    assert qs1["marker"]["pattern"]["shape"] == ["", "/"]
    assert qs1["marker"]["line"]["color"] == OKABE_ITO[0]
    assert figure["data"][1]["marker"]["line"]["color"] == OKABE_ITO[1]


def test_bar_lengths_are_milliseconds_and_open_bars_reach_now() -> None:
    figure = fleet([{"name": UNIT, "max_capacity": 2}],
                   [bar("QS1", 0, 30, 20), bar("QS1", 1, 5, None)])
    trace = figure["data"][0]
    assert trace["x"] == [10 * 60 * 1000, 5 * 60 * 1000]
    start_ms = int((NOW - timedelta(minutes=5)).timestamp() * 1000)
    assert trace["meta"] == {"time_base": True, "open": [[1, start_ms]]}


def test_warm_pool_periods_are_their_own_paler_dotted_bars() -> None:
    figure = fleet([{"name": UNIT, "max_capacity": 1}],
                   [bar("QS3", 0, 20, 10), bar("QS3", 0, 10, None, kind="warm")])
    run, warm = figure["data"]
    assert (run["name"], warm["name"]) == ("QS3", "QS3 warm pool")
    assert warm["marker"]["pattern"]["shape"] == ["."]
    assert float(warm["marker"]["color"].rsplit(",", 1)[1].rstrip(")")) < \
        float(run["marker"]["color"].rsplit(",", 1)[1].rstrip(")"))
    assert warm["customdata"][0][2] == "warm pool, Available"


def test_a_stopping_victim_is_a_thin_crossed_bar_drawn_over_the_waiting_preemptor() -> None:
    stopping = {**bar("QS1", 0, 1, 0.5, kind="stopping", job="qs1_job_high"),
                "preempted_by_name": "qs1_job_low"}
    figure = fleet([{"name": UNIT, "max_capacity": 1}],
                   [stopping, bar("QS1", 0, 1, None, job="qs1_job_low"),
                    bar("QS2", 0, 20, 1)])
    names = [trace["name"] for trace in figure["data"]]
    assert names == ["QS1", "QS2", "QS1 stopping (grace)"]
    last = figure["data"][-1]
    assert last["width"] == [0.28] and last["marker"]["pattern"]["shape"] == "x"
    assert last["x"] == [30_000]
    assert last["customdata"][0][2] == "stopping: SIGTERM sent for qs1_job_low"


def test_run_bars_carry_their_job_name_inside_where_it_fits() -> None:
    figure = fleet([{"name": UNIT, "max_capacity": 2}],
                   [bar("QS1", 0, 30, 20, job="train_big"),
                    bar("QS1", 1, 5, None, job="short"),
                    bar("QS1", 1, 20, 10, kind="warm", job="train_big")])
    run, warm = figure["data"]
    assert run["text"] == ["train_big", "short"]
    assert (run["textposition"], run["insidetextanchor"]) == ("inside", "start")
    assert "text" not in warm
    assert figure["layout"]["uniformtext"] == {"mode": "hide", "minsize": 9}


def test_the_fleet_is_stacked_as_overlay_with_instances_top_down() -> None:
    figure = fleet([{"name": UNIT, "max_capacity": 3}], [bar("QS1", 0, 5, 1)])
    layout = figure["layout"]
    assert layout["barmode"] == "overlay"
    assert layout["yaxis"]["categoryarray"] == [f"{UNIT} #0", f"{UNIT} #1", f"{UNIT} #2"]
    assert layout["yaxis"]["range"] == [2.5, -0.5]


def test_an_empty_fleet_says_what_will_appear() -> None:
    figure = fleet([{"name": UNIT, "max_capacity": 2}], [])
    assert figure["data"] == []
    assert "dispatched jobs appear here" in figure["layout"]["annotations"][0]["text"]


# Series helpers -------------------------------------------------------------------------


@pytest.mark.parametrize(("points", "start", "end", "expected"), [
    ([], 60, 0, 0.0),
    ([(50, 1)], 60, 0, 50 * 60.0),                  # nothing before the first sample
    ([(90, 2)], 60, 0, 2 * 60 * 60.0),              # clipped to the window
    ([(60, 1), (30, 0), (10, 3)], 60, 0, 30 * 60.0 + 3 * 10 * 60.0),
    ([(60, 1)], 0, 60, 0.0),                        # an empty window
])
def test_integrate_reads_samples_as_a_step_function(
    points: list[tuple[float, int]], start: float, end: float, expected: float
) -> None:
    samples = [{"time": at(minutes), "borrowed": value} for minutes, value in points]
    assert series.integrate(samples, "borrowed", at(start), at(end)) == pytest.approx(expected)


def _series(points: list[tuple[float, int]]) -> list[dict[str, Any]]:
    return [{"time": at(minutes), "own": value, "id": index}
            for index, (minutes, value) in enumerate(points)]


def test_downsampling_keeps_each_buckets_peak_and_the_level_carried_in() -> None:
    # 60 minutes in 6 buckets of 10; a 1-minute spike to 5 in the second bucket.
    points = [(60, 1), (55, 1), (45, 5), (44, 1), (35, 2), (25, 2), (24, 0), (5, 3)]
    kept = series.downsample(_series(points), ("own",), at(60), at(0), 6)
    assert [(sample["time"], sample["own"]) for sample in kept] == [
        (at(60), 1), (at(45), 5), (at(35), 2), (at(25), 2), (at(5), 3)]


def test_a_short_series_is_not_downsampled() -> None:
    samples = _series([(3, 1), (2, 0)])
    assert series.downsample(samples, ("own",), at(60), at(0), 6) is samples


def test_bars_close_together_on_one_instance_merge_for_a_long_range() -> None:
    bars = [{**bar("QS1", 0, 60, 50, job="a"), "job_id": 1},
            {**bar("QS1", 0, 49.9, 40, job="b", borrowed=1), "job_id": 2},
            {**bar("QS1", 0, 20, None, job="c"), "job_id": 3},
            {**bar("QS2", 0, 45, 44, job="d"), "job_id": 4}]
    merged = gantt.merge_bars(bars, tolerance_seconds=30)
    assert [(b["quota_share"], b["start"], b["end"], b["job_name"], b["borrowed_instances"])
            for b in merged] == [("QS1", at(60), at(40), "2 jobs", 1),
                                 ("QS1", at(20), None, "c", 0),
                                 ("QS2", at(45), at(44), "d", 0)]


def test_a_chosen_range_shows_its_whole_span_and_a_custom_one_stays_put() -> None:
    colours = figures.share_colours(["QS1"])
    week = figures.timeline_figure([row("QS1")], [sample("QS1", 5, own=1)], [],
                                   colours=colours, now=NOW, window_seconds=7 * 86400,
                                   fixed_start=NOW - timedelta(days=7))
    assert week["layout"]["xaxis"]["range"] == [series.iso(NOW - timedelta(days=7)),
                                                series.iso(NOW)]
    assert week["layout"]["meta"]["earliest"] is None
    assert week["layout"]["meta"]["follow_now"] is True
    fixed = gantt.fleet_figure([{"name": UNIT, "max_capacity": 1}], [], colours=colours,
                                 now=NOW, fixed_start=NOW - timedelta(hours=2),
                                 follow_now=False)
    assert fixed["layout"]["meta"]["follow_now"] is False
    assert fixed["layout"]["xaxis"]["range"][0] == at(120)


def test_times_must_carry_a_zone() -> None:
    with pytest.raises(ValueError):
        series.parse_time("2026-01-01T00:00:00")
    assert series.iso("2026-01-01T01:00:00+01:00") == "2026-01-01T00:00:00.000Z"


def test_the_builders_import_only_the_standard_library() -> None:
    """Pure functions: no Django, no database, no clock (docs/architecture.md, Charts)."""
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    for module in (figures, series, times):
        tree = ast.parse(Path(str(module.__file__)).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert (node.module or "").split(".")[0] in allowed, node.module
            elif isinstance(node, ast.ImportFrom):  # the pure helpers, and only them
                names = [alias.name for alias in node.names]
                assert node.module == "series" or (node.module, names) == (
                    "read_model", ["times"]), node.module
            elif isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] in allowed for a in node.names)
        source = Path(str(module.__file__)).read_text()
        assert "datetime.now" not in source and "time.time" not in source
