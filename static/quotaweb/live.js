// Quotaweb's live updates: one websocket, no polling, no reloads.
//
// The server renders every page and builds every figure (quotaweb/web/figures.py); this
// module only keeps them current:
// - it connects to /ws/events/?after=<the last event id the page shows>, so the server
//   replays what happened since the page was rendered, then fetches the usage samples it
//   missed (the websocket replays events, not samples);
// - "event" messages go to the event feed (preemptions highlighted, with a toast; a
//   configuration change in the server's words, its `changes`, as text only), add
//   preemption markers to timelines, and re-fetch the server-rendered fragments whose
//   data-live-on tokens match them;
// - "usage" messages update the share cards' figures and append points to the timeline
//   traces named by their meta (see figures.py), redrawn with Plotly.react;
// - "estimates" messages (after a background refresh changed some) rewrite the estimated
//   starts in place: every [data-estimate="<job id>"] element, in the server's own words
//   (the message carries them); between refreshes the words count down to the moment
//   (startsIn, the server's wording written again, and checked against it by a test);
//   after a reconnection the fragments showing estimates are fetched again (pushes are
//   not replayed);
// - a "snapshot" (after a long disconnection) re-synchronises everything.
// It reconnects with exponential backoff, and drops event and sample ids it already has.
// Times are shown in the viewer's time zone.

const config = readJSON("live-config");
const REFRESH_DELAY_MS = 250;
const TICK_MS = 1000;
const REDRAW_EVERY_TICKS = 5;
const MAX_BACKOFF_MS = 30000;
const TOAST_MS = 9000;

const state = {
  lastEventId: 0,
  lastSampleId: 0,
  samplesSeen: new Set(),
  latestSampleOf: new Map(), // series key -> newest sample id applied to the cards
  jobs: new Map(),           // job id -> {name, unit}
  retries: 0,
  skewMs: 0,                 // server clock minus this browser's clock
  connected: false,          // whether a socket was ever open: then an open is a reconnection
  figures: [],
  ticks: 0,
};

function readJSON(id) {
  const element = document.getElementById(id);
  return element ? JSON.parse(element.textContent) : null;
}

// Time ---------------------------------------------------------------------------------

const timeFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });
const clockFormat = new Intl.DateTimeFormat(undefined, { timeStyle: "medium" });

function now() {
  return new Date(Date.now() + state.skewMs);
}

function pad(number, width = 2) {
  return String(number).padStart(width, "0");
}

// Plotly draws date strings as they are: give it the viewer's local wall-clock time.
function localize(value) {
  const d = value instanceof Date ? value : new Date(value);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

function localizeTimes(root) {
  for (const element of root.querySelectorAll("time[data-local]")) {
    element.textContent = timeFormat.format(new Date(element.dateTime));
    element.title = element.dateTime;
  }
}

function durationText(seconds) {
  const whole = Math.max(0, Math.round(seconds));
  const h = Math.floor(whole / 3600);
  const m = Math.floor((whole % 3600) / 60);
  const s = whole % 60;
  if (h) return `${h} h ${pad(m)} min`;
  if (m) return `${m} min ${pad(s)} s`;
  return `${s} s`;
}

function updateClocks() {
  const moment = now().getTime();
  for (const element of document.querySelectorAll("[data-starts-at]")) {
    element.textContent = startsIn((new Date(element.dataset.startsAt).getTime() - moment) / 1000);
  }
  for (const element of document.querySelectorAll("[data-countdown]")) {
    const left = (new Date(element.dataset.countdown).getTime() - moment) / 1000;
    element.textContent = left > 0 ? durationText(left) : "due now";
  }
  for (const element of document.querySelectorAll("[data-count-up-base]")) {
    element.dataset.shownAt ??= String(Date.now());
    const elapsed = (Date.now() - Number(element.dataset.shownAt)) / 1000;
    element.textContent = Math.floor(Number(element.dataset.countUpBase) + elapsed);
  }
}

// An estimated start in words, counting down between refreshes: the same words as
// scheduler/forecast.py's starts_in, which the server renders and pushes (a browser test
// compares the two over a table of durations).  Python's round() rounds halves to even.
function roundHalfEven(value) {
  const rounded = Math.round(value);
  return Math.abs(value % 1) === 0.5 ? 2 * Math.round(value / 2) : rounded;
}

function startsIn(seconds) {
  if (seconds < 30) return "starts in a moment";
  const minutes = roundHalfEven(seconds / 60);
  if (minutes < 60) return `starts in about ${Math.max(minutes, 1)} min`;
  const hours = roundHalfEven(seconds / 3600);
  if (hours < 48) return `starts in about ${hours} h`;
  return `starts in about ${roundHalfEven(seconds / 86400)} days`;
}

// Figures ------------------------------------------------------------------------------

function localizeFigure(figure) {
  for (const trace of figure.data) {
    const meta = trace.meta || {};
    if (meta.tail || meta.markers || meta.times) {
      trace.x = trace.x.map((x) => (x === null ? null : localize(x)));
    }
    if (meta.time_base) trace.base = trace.base.map(localize);
  }
  for (const axis of figure.layout.meta?.time_axes || []) {
    const range = figure.layout[axis]?.range;
    if (range) figure.layout[axis].range = range.map(localize);
  }
  return figure;
}

// On a phone the legend would wrap over the time axis: the key under the chart says the
// same.
function fitLegend(figure, div) {
  if (div.clientWidth < 640) figure.layout.showlegend = false;
}

// The container has the figure's height, given explicitly: with the responsive config
// Plotly resizes a chart to its container when the window changes, and a container
// sized only by its drawing would shrink to its CSS minimum (the drawing staying tall
// and spilling over what follows).  Each redraw asks for the height again, since a
// resize leaves the layout without one.
function fixHeight(entry, figure) {
  if (figure.layout.height) entry.height = figure.layout.height;
  if (entry.height) {
    entry.div.style.height = `${entry.height}px`;
    figure.layout.height = entry.height;
  }
}

// Hover labels stay inside the plot area.  Plotly keeps a label inside the whole figure
// at best, and a label wider than the room beside its point spills over the axis titles,
// or off a phone's screen.  Plotly redraws its labels at every mouse move (without an
// event when the point is the same), so an observer of the hover layer moves each label
// that reaches past the plot area back in, shrinking it first if it is wider or taller
// than the area.  A label already inside is left alone, so its own change ends the loop.
function plotArea(div) {
  // The subplots' drag rectangles: each covers one subplot's axes, margins excluded.
  const rects = [...div.querySelectorAll(".draglayer .nsewdrag")]
    .map((rect) => rect.getBoundingClientRect()).filter((rect) => rect.width > 0);
  if (!rects.length) return null;
  return { left: Math.min(...rects.map((r) => r.left)), top: Math.min(...rects.map((r) => r.top)),
           right: Math.max(...rects.map((r) => r.right)),
           bottom: Math.max(...rects.map((r) => r.bottom)) };
}

const TRANSLATE = /translate\(\s*(-?[\d.e+-]+)[ ,]+(-?[\d.e+-]+)\s*\)/;

function keepLabelInside(label, area) {
  const rect = label.getBoundingClientRect();
  if (rect.left >= area.left - 0.5 && rect.right <= area.right + 0.5
      && rect.top >= area.top - 0.5 && rect.bottom <= area.bottom + 0.5) return;
  const match = TRANSLATE.exec(label.getAttribute("transform") || "");
  if (!match) return;
  const [x, y] = [Number(match[1]), Number(match[2])];
  const oldScale = Number(/scale\(([\d.e+-]+)\)/.exec(label.getAttribute("transform"))?.[1] || 1);
  const scale = oldScale * Math.min(1, (area.right - area.left) / rect.width,
                                    (area.bottom - area.top) / rect.height);
  label.setAttribute("transform", `translate(${x},${y}) scale(${scale})`);
  const fitted = label.getBoundingClientRect();
  const dx = fitted.left < area.left ? area.left - fitted.left
    : Math.min(0, area.right - fitted.right);
  const dy = fitted.top < area.top ? area.top - fitted.top
    : Math.min(0, area.bottom - fitted.bottom);
  label.setAttribute("transform", `translate(${x + dx},${y + dy}) scale(${scale})`);
}

function keepHoverInside(div) {
  const observer = new MutationObserver((records) => {
    if (!records.some((record) => record.target.closest?.(".hoverlayer"))) return;
    const area = plotArea(div);
    if (!area) return;
    for (const label of div.querySelectorAll(".hoverlayer g.hovertext")) {
      keepLabelInside(label, area);
    }
  });
  observer.observe(div, { subtree: true, childList: true, attributes: true,
                          attributeFilter: ["transform"] });
}

function initFigures() {
  for (const div of document.querySelectorAll("[data-figure]")) {
    const figure = localizeFigure(readJSON(div.dataset.figure));
    fitLegend(figure, div);
    const entry = { div, follow: true, dirty: false, config: figure.config, height: null };
    fixHeight(entry, figure);
    Plotly.newPlot(div, figure.data, figure.layout, figure.config);
    keepHoverInside(div);
    div.on("plotly_relayout", (change) => {
      if (change["xaxis.autorange"]) {
        entry.follow = true; // double-click: follow the clock again
        followClock(entry);
        redraw(entry);
      } else if ("xaxis.range[0]" in change || "xaxis.range" in change) {
        entry.follow = false; // the viewer zoomed or panned: leave the window alone
      }
    });
    state.figures.push(entry);
  }
}

// The window that follows the clock: as figures.visible_start computes it on the server.
function followClock(entry) {
  const layout = entry.div.layout;
  const meta = layout.meta || {};
  if (meta.follow_now === false) return; // a custom period: its axis stays where it is
  const end = now().getTime();
  let start = end - (meta.window_seconds || 1800) * 1000;
  if (meta.earliest) {
    const lead = Math.min(new Date(meta.earliest).getTime() - (meta.lead_seconds || 0) * 1000,
      end - (meta.min_window_seconds || 0) * 1000);
    start = Math.max(start, lead);
  }
  layout.xaxis.autorange = false;
  layout.xaxis.range = [localize(new Date(start)), localize(new Date(end))];
}

function moveToNow(entry) {
  const moment = now();
  const stamp = localize(moment);
  for (const trace of entry.div.data) {
    const meta = trace.meta || {};
    if (meta.tail && trace.x.length > 1 && trace.x[trace.x.length - 1] < stamp) {
      trace.x[trace.x.length - 1] = stamp;
    }
    for (const [index, startMs] of meta.open || []) {
      trace.x[index] = Math.max(0, moment.getTime() - startMs);
    }
  }
  if (entry.follow) followClock(entry);
}

// Plotly leaves an empty trace out of the legend, so each mark's entry belongs to the first
// row that draws it (as figures._legend_on_drawn_rows does on the server): when the first
// mark of a kind arrives live on another row, the entry moves to that row with it.
// Only the timelines' marks: a Gantt's legend groups are share names, whatever they are.
const MARK_GROUPS = ["CROSS_SHARE", "IN_SHARE", "RECLAIM_RETURNED", "stopping"];

function legendOnDrawnRows(data) {
  const marks = data.filter((trace) => trace.meta?.markers || trace.meta?.stopping);
  for (const group of MARK_GROUPS) {
    const traces = marks.filter((trace) => trace.legendgroup === group);
    const drawn = traces.find((trace) => trace.x.length > 0) || traces[0];
    for (const trace of traces) trace.showlegend = trace === drawn;
  }
}

function redraw(entry) {
  entry.dirty = false;
  legendOnDrawnRows(entry.div.data);
  const layout = entry.div.layout;
  layout.datarevision = (layout.datarevision || 0) + 1;
  if (entry.height) layout.height = entry.height;
  Plotly.react(entry.div, entry.div.data, layout, entry.config);
}

function redrawDirty() {
  for (const entry of state.figures) if (entry.dirty) redraw(entry);
}

// A usage trace ends with a "tail" at now repeating its last value: take it off, put the
// point in time order, and put the tail back.
function insertPoint(trace, x, y) {
  const xs = trace.x;
  const ys = trace.y;
  if (xs.length) {
    xs.pop();
    ys.pop();
  }
  let index = xs.length;
  while (index > 0 && xs[index - 1] > x) index -= 1;
  xs.splice(index, 0, x);
  ys.splice(index, 0, y);
  const stamp = localize(now());
  const last = xs[xs.length - 1];
  xs.push(stamp > last ? stamp : last);
  ys.push(ys[ys.length - 1]);
}

function applySample(sample) {
  if (state.samplesSeen.has(sample.id)) return;
  state.samplesSeen.add(sample.id);
  state.lastSampleId = Math.max(state.lastSampleId, sample.id);
  const key = `${sample.quota_share}|${sample.capacity_unit}`;
  if ((state.latestSampleOf.get(key) || 0) < sample.id) {
    state.latestSampleOf.set(key, sample.id);
    for (const element of document.querySelectorAll("[data-series][data-field]")) {
      if (element.dataset.series === key) element.textContent = sample[element.dataset.field];
    }
  }
  const x = localize(sample.time);
  for (const entry of state.figures) {
    for (const trace of entry.div.data) {
      const meta = trace.meta || {};
      if (meta.series === key && meta.tail && meta.field in sample) {
        insertPoint(trace, x, sample[meta.field]);
        entry.dirty = true;
      }
    }
    const layoutMeta = entry.div.layout.meta;
    if (entry.dirty && layoutMeta && !layoutMeta.earliest) layoutMeta.earliest = sample.time;
    const notes = entry.div.layout.annotations || [];
    const kept = notes.filter((note) => note.name !== `empty:${key}`);
    if (kept.length !== notes.length) entry.div.layout.annotations = kept;
  }
}

// A preemption is marked on the victim's row; a reclaim also on the row of the share
// whose capacity came back, the preemptor's (as usage_data.preemption_markers does).
function addMarker(event) {
  const details = event.details || {};
  const unit = state.jobs.get(String(event.job))?.unit;
  const marks = [[details.kind, event.quota_share, details.kind]];
  const lender = state.jobs.get(String(details.preempted_by))?.share;
  if (details.kind === "CROSS_SHARE" && lender) {
    marks.push(["RECLAIM_RETURNED", lender, "CROSS_SHARE: capacity came back"]);
  }
  for (const entry of state.figures) {
    for (const [kind, share, label] of marks) {
      const candidates = entry.div.data.filter((trace) =>
        trace.meta?.markers === kind && trace.meta.share === share);
      const trace = candidates.find((t) => t.meta.unit === unit) || candidates[0];
      if (!trace) continue;
      trace.x.push(localize(event.time));
      trace.y.push(trace.meta.y);
      trace.customdata.push([jobName(event.job, event.job_name), jobName(details.preempted_by), label]);
      entry.dirty = true;
    }
  }
}

// A victim's grace period (SIGTERM sent, SIGKILL at its end): PREEMPTED events do not
// carry its end, so the page asks the server for the periods again, and redraws the
// timelines' "stopping" traces (as figures.stopping_points builds them).
const STOPPING_Y = 0.62;

function stoppingPoints(periods) {
  const x = [];
  const y = [];
  const customdata = [];
  for (const period of periods) {
    const hover = [period.job_name, period.preempted_by_name, localize(period.until)];
    x.push(localize(period.since), localize(period.until), null);
    y.push(STOPPING_Y, STOPPING_Y, null);
    customdata.push(hover, hover, null);
  }
  return { x, y, customdata };
}

async function refreshStopping() {
  const traces = state.figures.flatMap((entry) =>
    entry.div.data.filter((trace) => trace.meta?.stopping).map((trace) => [entry, trace]));
  if (!traces.length || !config.stopping_url) return;
  try {
    const response = await fetch(config.stopping_url);
    if (!response.ok || response.redirected) return;
    const { periods } = await response.json();
    for (const [entry, trace] of traces) {
      const mine = periods.filter((p) => `${p.quota_share}|${p.capacity_unit}` === trace.meta.series);
      Object.assign(trace, stoppingPoints(mine));
      entry.dirty = true;
    }
    redrawDirty();
  } catch (error) {
    console.warn("could not fetch the grace periods", error);
  }
}

// Events -------------------------------------------------------------------------------

function jobName(id, known) {
  if (id === null || id === undefined) return "?";
  return known || state.jobs.get(String(id))?.name || `job #${id}`;
}

function jobLink(id, name) {
  return { job: id, name: jobName(id, name) };
}

// A sentence for an event, as parts: text, or {job, name} for a link to a job's page.
function describe(event) {
  const d = event.details || {};
  const job = event.job === null ? "" : jobLink(event.job, event.job_name);
  switch (event.type) {
    case "SUBMITTED": return [job, ` submitted to ${event.quota_share}`];
    case "PRIORITY_UPDATED": return [job, `: priority set to ${d.priority}`];
    case "DISPATCHED": return [job, " dispatched",
      d.borrowed_instances ? `, borrowing ${d.borrowed_instances}` : "",
      d.warm_start ? ", on a warm pool" : ""];
    case "RUNNING": return [job, " is running"];
    case "SUCCEEDED": return [job, " succeeded"];
    case "ATTEMPT_FAILED": return [job, `: attempt failed (${d.failure || "error"}), retrying`];
    case "FAILED": return [job, ` failed${d.reason ? `: ${d.reason}` : ""}`];
    case "PREEMPTED": return [jobLink(d.preempted_by), " preempted ", job, ` (${d.kind})`];
    case "TERMINATED": return [job, ` terminated${d.reason ? `: ${d.reason}` : ""}`];
    case "WARM_POOL_AVAILABLE": return [job, "'s warm pool is Available"];
    case "WARM_POOL_REUSED": return [job, "'s warm pool was reused by ", jobLink(d.reused_by)];
    case "WARM_POOL_UPDATED": return [job, `: keep-alive set to ${d.keep_alive_seconds} s`];
    case "WARM_POOL_TERMINATED": return [job, `'s warm pool ended (${d.reason})`];
    // A configuration change that kept its values comes with the server's sentences.
    case "SHARE_UPDATED": return [event.changes
      ? `Quota share ${event.quota_share}: ${event.changes.join("; ")}`
      : `Quota share ${event.quota_share} changed: ${(d.fields || []).join(", ")}`];
    case "SHARE_DELETED": return [`Quota share ${event.quota_share} deleted`];
    case "CAPACITY_UPDATED": return [event.changes
      ? `Capacity of ${d.capacity_unit}: ${event.changes.join("; ")}`
      : `Capacity of ${d.capacity_unit} changed`];
    default: return [job, ` ${event.type}`];
  }
}

function render(parts, container) {
  for (const part of parts) {
    if (!part) continue;
    if (typeof part === "string") {
      container.append(part);
    } else {
      const link = document.createElement("a");
      link.href = `${config.job_url_prefix}${part.job}`;
      link.textContent = part.name;
      container.append(link);
    }
  }
}

function addToFeed(event, fresh) {
  const feed = document.getElementById("event-feed");
  if (!feed) return;
  const item = document.createElement("li");
  item.dataset.eventId = event.id;
  if (event.type === "PREEMPTED") item.classList.add("preempted");
  if (fresh) item.classList.add("fresh");
  const time = document.createElement("time");
  time.dateTime = event.time;
  time.title = timeFormat.format(new Date(event.time));
  time.textContent = clockFormat.format(new Date(event.time));
  const text = document.createElement("div");
  const type = document.createElement("span");
  type.className = "type";
  type.textContent = event.type;
  text.append(type);
  render(describe(event), text);
  if (event.quota_share) {
    const share = document.createElement("small");
    share.className = "muted";
    share.textContent = ` · ${event.quota_share}`;
    text.append(share);
  }
  item.append(time, text);
  feed.prepend(item);
  const limit = Number(feed.dataset.limit || 100);
  while (feed.children.length > limit) feed.lastElementChild.remove();
  const empty = document.getElementById("event-feed-empty");
  if (empty) empty.hidden = true;
}

function toast(event) {
  const box = document.getElementById("toasts");
  if (!box) return;
  const note = document.createElement("div");
  note.className = "toast";
  note.setAttribute("role", "status");
  const title = document.createElement("strong");
  title.textContent = event.details?.kind === "CROSS_SHARE" ? "Reclaim" : "Preemption";
  note.append(title);
  render(describe(event), note);
  box.append(note);
  while (box.children.length > 4) box.firstElementChild.remove();
  setTimeout(() => note.remove(), TOAST_MS);
}

function applyEvent(event) {
  if (event.id <= state.lastEventId) return; // already shown (delivery is at least once)
  state.lastEventId = event.id;
  if (event.job !== null && event.job_name) {
    const known = state.jobs.get(String(event.job)) || {};
    state.jobs.set(String(event.job), { ...known, name: event.job_name,
      share: event.quota_share || known.share });
  }
  addToFeed(event, true);
  if (event.type === "PREEMPTED") {
    addMarker(event);
    toast(event);
    if (!state.stoppingTimer) {
      state.stoppingTimer = setTimeout(() => {
        state.stoppingTimer = null;
        refreshStopping();
      }, REFRESH_DELAY_MS);
    }
  }
  refreshMatching({ kind: "event", event });
}

// Estimated starts ---------------------------------------------------------------------

// As the server renders them (templates: partials/job_rows.html, the table cell, and
// fragments/job_status.html, the job page's line, marked data-estimate-long):
// "starts in about 4 min" with the basis as its title, or "starts in about 4 min, when
// … ends (<local time>)"; nothing, and the job page's line hidden, without an estimate.
function showEstimate(element, item) {
  element.replaceChildren();
  const row = element.hasAttribute("data-estimate-long") ? element.parentElement : null;
  if (row) row.hidden = !item.starts;
  if (!item.starts) return;
  const words = document.createElement("span");
  words.textContent = item.starts;
  if (item.estimated_start_at) words.dataset.startsAt = item.estimated_start_at;
  if (!row) {
    words.title = item.estimate_basis || "";
    element.append(words);
    return;
  }
  element.append(words, `, ${item.estimate_basis}`);
  if (item.estimated_start_at) {
    const small = document.createElement("small");
    const time = document.createElement("time");
    time.dateTime = item.estimated_start_at;
    time.dataset.local = "";
    small.append("(", time, ")");
    element.append(" ", small);
    localizeTimes(element);
  }
}

// Estimates are not events: the server replays missed events after a reconnection, not
// the estimates it pushed meanwhile.  So after a reconnection the fragments that show any
// are fetched again (after a long disconnection the snapshot fetches every fragment).
function refreshEstimates() {
  for (const element of document.querySelectorAll("[data-live-fragment]")) {
    if (element.querySelector("[data-estimate]")) scheduleRefresh(element);
  }
}

// The status the page shows beside an estimate: its table row's, or the job page's.
function shownStatus(element) {
  const status = element.closest("tr")?.querySelector(".status")
    || (element.hasAttribute("data-estimate-long") ? document.getElementById("job-status") : null);
  return status ? status.textContent.trim() : null;
}

const QUEUED = new Set(["SUBMITTED", "RUNNABLE"]);

function applyEstimates(items) {
  for (const item of items) {
    for (const element of document.querySelectorAll(`[data-estimate="${Number(item.job)}"]`)) {
      // An estimate read just before the job was placed may arrive after the page showed
      // it placed (the event's fragment came first): the page keeps what it shows.
      const status = shownStatus(element);
      if (item.starts && status && !QUEUED.has(status)) continue;
      showEstimate(element, item);
    }
  }
}

// Fragments: server-rendered parts of the page, fetched again when an event says so -----

function matches(spec, message) {
  if (message.kind === "all") return true;
  const event = message.event;
  return spec.split(/\s+/).filter(Boolean).some((token) => {
    const [name, value] = token.split(/:(.*)/s);
    if (message.kind === "usage") return name === "usage" && (!value || value === message.share);
    if (name === "event") return true;
    if (name === "job") return event.job !== null && (!value || String(event.job) === value);
    if (name === "type") return event.type === value;
    if (name === "share") return event.quota_share === value;
    return false;
  });
}

function refreshMatching(message) {
  for (const element of document.querySelectorAll("[data-live-on]")) {
    if (matches(element.dataset.liveOn, message)) scheduleRefresh(element);
  }
}

// A SUBMITTED job becomes RUNNABLE (with its pending reason) in the next cycle, and no
// event says so: a fragment showing one looks again once a cycle has run, a few times at
// most (then the next event about it refreshes it).
const MAX_RECHECKS = 3;

function recheckLater(element) {
  const marker = element.querySelector("[data-recheck-after]");
  const done = Number(element.dataset.rechecks || 0);
  if (!marker || done >= MAX_RECHECKS) return;
  element.dataset.rechecks = String(done + 1);
  setTimeout(() => scheduleRefresh(element), Number(marker.dataset.recheckAfter));
}

function scheduleRefresh(element) {
  if (element.refreshTimer) return;
  element.refreshTimer = setTimeout(() => {
    element.refreshTimer = null;
    refresh(element);
  }, REFRESH_DELAY_MS);
}

async function refresh(element) {
  if (element.refreshing) {
    element.refreshAgain = true;
    return;
  }
  // Never replace a form the viewer is typing in, nor the problems the server found in
  // what they sent: wait until they leave it.
  const typing = element.contains(document.activeElement) && document.activeElement !== document.body;
  if (typing || element.querySelector(".field-error, .form-errors")) {
    element.addEventListener("focusout", () => scheduleRefresh(element), { once: true });
    return;
  }
  element.refreshing = true;
  try {
    const url = element.dataset.liveFragment || element.dataset.figureUrl;
    const response = await fetch(url, { headers: { "X-Requested-With": "fetch" } });
    if (response.redirected || !response.ok) {
      if (response.redirected) setStatus("signed-out");
      return;
    }
    if (element.dataset.liveFragment) {
      element.innerHTML = await response.text();
      localizeTimes(element);
      updateClocks();
      recheckLater(element);
    } else {
      replaceFigure(element, await response.json());
    }
  } catch (error) {
    console.warn("could not refresh", element, error);
  } finally {
    element.refreshing = false;
    if (element.refreshAgain) {
      element.refreshAgain = false;
      scheduleRefresh(element);
    }
  }
}

function replaceFigure(div, figure) {
  const entry = state.figures.find((item) => item.div === div);
  localizeFigure(figure);
  fitLegend(figure, div);
  if (entry && !entry.follow) figure.layout.xaxis.range = div.layout.xaxis.range;
  if (entry) {
    entry.config = figure.config;
    fixHeight(entry, figure);
  }
  Plotly.react(div, figure.data, figure.layout, figure.config);
  if (entry) moveToNow(entry);
}

// The connection -----------------------------------------------------------------------

function setStatus(status) {
  const badge = document.getElementById("live-status");
  if (!badge) return;
  badge.dataset.state = status;
  badge.textContent = { live: "live", reconnecting: "reconnecting…", "signed-out": "signed out" }[status] || status;
}

async function fillUsageGap() {
  try {
    for (let more = true; more;) {
      const response = await fetch(`${config.usage_url}?after=${state.lastSampleId}`);
      if (!response.ok || response.redirected) return;
      const body = await response.json();
      body.samples.forEach(applySample);
      more = body.more && body.samples.length > 0;
    }
    redrawDirty();
  } catch (error) {
    console.warn("could not fetch missed usage samples", error);
  }
}

function applySnapshot(message) {
  // The log no longer holds what was missed: take the state as it is now.  A large
  // snapshot comes in parts (part 1..parts); each adds its jobs, the first the usage.
  state.lastEventId = Math.max(state.lastEventId, message.last_event_id);
  for (const job of message.jobs || []) {
    state.jobs.set(String(job.id), { name: job.name, unit: job.instance_type, share: job.quota_share });
  }
  (message.usage || []).forEach(applySample);
  refreshMatching({ kind: "all" });
  for (const entry of state.figures) if (entry.div.dataset.figureUrl) scheduleRefresh(entry.div);
}

function handle(message) {
  if (message.type === "event") applyEvent(message.event);
  else if (message.type === "usage") {
    message.samples.forEach(applySample);
    for (const share of new Set(message.samples.map((s) => s.quota_share))) {
      refreshMatching({ kind: "usage", share });
    }
  } else if (message.type === "estimates") applyEstimates(message.estimates);
  else if (message.type === "snapshot") applySnapshot(message);
  redrawDirty();
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}${config.ws_path}?after=${state.lastEventId}`);
  socket.addEventListener("open", () => {
    state.retries = 0;
    setStatus("live");
    fillUsageGap();
    if (state.connected) refreshEstimates(); // a reconnection: pushes may have been missed
    state.connected = true;
  });
  socket.addEventListener("message", (message) => handle(JSON.parse(message.data)));
  socket.addEventListener("close", (closed) => {
    // 4401: signed out here or elsewhere, or the user was deactivated: no point retrying.
    if (closed.code === 4401) return setStatus("signed-out");
    setStatus("reconnecting");
    // 4429: this user has too many live tabs open; retry at the slowest pace.
    if (closed.code === 4429) state.retries = Math.max(state.retries, 6);
    const delay = Math.min(MAX_BACKOFF_MS, 500 * 2 ** state.retries) * (0.75 + Math.random() / 2);
    state.retries += 1;
    setTimeout(connect, delay);
  });
}

function tick() {
  updateClocks();
  state.ticks += 1;
  if (state.ticks % REDRAW_EVERY_TICKS) return;
  for (const entry of state.figures) {
    moveToNow(entry);
    redraw(entry);
  }
}

function start() {
  state.lastEventId = config.last_event_id;
  state.lastSampleId = config.last_sample_id;
  state.skewMs = config.server_now ? new Date(config.server_now).getTime() - Date.now() : 0;
  for (const [id, job] of Object.entries(config.jobs || {})) state.jobs.set(id, job);
  localizeTimes(document);
  updateClocks();
  if (window.Plotly) initFigures();
  for (const event of readJSON("initial-events") || []) addToFeed(event, false);
  document.querySelectorAll("[data-live-fragment]").forEach(recheckLater);
  connect();
  setInterval(tick, TICK_MS);
  window.quotaweb = state; // for the browser tests and a curious reader
  window.quotawebStartsIn = startsIn; // a browser test compares it with the server's words
}

if (config) {
  if (document.readyState === "complete" || window.Plotly || !document.querySelector("[data-figure]")) start();
  else window.addEventListener("load", start, { once: true });
}
