// rondo's dashboard: per-round samples from /api/events (server-sent
// events: a `history` array first, then one `round` event per round) drawn
// with uPlot (vendored, served by rondo). The page marks what it has drawn
// in <body data-points="N"> and its title, which the screenshot test reads.
"use strict";

// Per disk, the storage node that reads it (filled from /api/disks).
let diskNodes = [];
const MAX_ROUNDS = 300;
const STATES = ["healthy", "suspect", "failed", "rebuilding"];
const COLORS = { reserved: "#1565c0", measured: "#e65100", model: "#7b8794" };

const samples = [];
let charts = null;
let diskCount = 0;
const totals = { admitted: 0, rejected: 0, misses: 0, overruns: 0, sent: 0 };

const $ = id => document.getElementById(id);

function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
}

function rejected(s) {
  return s.rejected_disk_time + s.rejected_buffer + s.rejected_network + s.rejected_host + s.rejected_other;
}

function chartWidth(el) {
  return Math.max(260, el.clientWidth - 4);
}

function baseOpts(el, series, yLabel, yRange) {
  return {
    width: chartWidth(el),
    height: 160,
    legend: { live: false },
    cursor: { drag: { x: false, y: false } },
    scales: { x: { time: false }, y: yRange ? { range: yRange } : { range: (u, min, max) => [0, Math.max(1, max)] } },
    axes: [
      { label: "round", size: 36, labelSize: 14 },
      { label: yLabel, size: 46, labelSize: 14 },
    ],
    series: [{ label: "round" }].concat(series),
  };
}

// Two bar series side by side in each round: `align` -1 left, 1 right.
function bars(color, align) {
  return { stroke: color, fill: color + "aa", width: 1, paths: uPlot.paths.bars({ size: [0.45, 8], align }), points: { show: false } };
}

function makeCharts(disks) {
  const holder = $("diskCharts");
  holder.innerHTML = "";
  const diskCharts = [];
  for (let d = 0; d < disks; d++) {
    const card = document.createElement("div");
    card.className = "card";
    card.innerHTML = "<h2>disk " + d + "</h2>";
    const box = document.createElement("div");
    card.appendChild(box);
    holder.appendChild(card);
    const opts = baseOpts(box, [
      { label: "reserved", stroke: COLORS.reserved, width: 2, fill: COLORS.reserved + "1a" },
      { label: "measured", stroke: COLORS.measured, width: 2 },
      { label: "model", stroke: COLORS.model, width: 1, dash: [4, 3] },
    ], "fraction of T", (u, min, max) => [0, Math.max(0.1, Math.min(1.2, max * 1.1))]);
    diskCharts.push(new uPlot(opts, [[], [], [], []], box));
  }
  const streamsBox = $("streamsChart");
  const admissionsBox = $("admissionsChart");
  const missesBox = $("missesChart");
  const buffersBox = $("buffersChart");
  return {
    disks: diskCharts,
    streams: new uPlot(baseOpts(streamsBox, [
      { label: "active streams", stroke: "#2e7d32", width: 2, fill: "#2e7d3222" },
    ], "streams"), [[], []], streamsBox),
    admissions: new uPlot(baseOpts(admissionsBox, [
      Object.assign({ label: "admitted" }, bars("#2e7d32", -1)),
      Object.assign({ label: "rejected" }, bars("#c62828", 1)),
    ], "per round"), [[], [], []], admissionsBox),
    misses: new uPlot(baseOpts(missesBox, [
      Object.assign({ label: "deadline misses" }, bars("#c62828", -1)),
      Object.assign({ label: "disk-round overruns" }, bars("#ef8f00", 1)),
    ], "per round"), [[], [], []], missesBox),
    health: makeHealthChart(),
    buffers: new uPlot(baseOpts(buffersBox, [
      { label: "buffers in use (MiB)", stroke: "#6a1b9a", width: 2 },
      { label: "sent (MiB per round)", stroke: "#00838f", width: 2 },
    ], "MiB"), [[], [], []], buffersBox),
  };
}

// Disks not healthy (by state) per round and the rebuild's progress, on
// two scales.
function makeHealthChart() {
  const box = $("healthChart");
  box.innerHTML = "";
  const opts = baseOpts(box, [
    { label: "failed disks", stroke: "#c62828", width: 2, scale: "disks", paths: uPlot.paths.stepped({ align: 1 }) },
    { label: "suspect disks", stroke: "#ef8f00", width: 2, scale: "disks", paths: uPlot.paths.stepped({ align: 1 }) },
    { label: "rebuilding disks", stroke: "#1565c0", width: 2, scale: "disks", paths: uPlot.paths.stepped({ align: 1 }) },
    { label: "rebuild done (%)", stroke: "#6a1b9a", width: 2, dash: [6, 3], scale: "pct" },
  ], "disks");
  opts.height = 120;
  opts.scales = {
    x: { time: false },
    disks: { range: (u, min, max) => [0, Math.max(1, max)] },
    pct: { range: [0, 100] },
  };
  opts.axes = [
    { label: "round", size: 36, labelSize: 14 },
    { label: "disks", scale: "disks", size: 46, labelSize: 14, incrs: [1, 2, 5, 10] },
    { label: "rebuild %", scale: "pct", side: 1, size: 50, labelSize: 14, grid: { show: false } },
  ];
  return new uPlot(opts, [[], [], [], [], []], box);
}

// Seed 004's dynamic cycle: its length (s) and u_m, u_t (fractions), on
// two scales; shown only when the server runs one.
function makeCycleChart() {
  const box = $("cycleChart");
  box.innerHTML = "";
  const opts = baseOpts(box, [
    { label: "cycle (s)", stroke: "#2e7d32", width: 2, scale: "s", paths: uPlot.paths.stepped({ align: 1 }) },
    { label: "memory u_m", stroke: "#6a1b9a", width: 2, scale: "u" },
    { label: "disk time u_t", stroke: "#1565c0", width: 2, scale: "u" },
  ], "s");
  opts.scales = {
    x: { time: false },
    s: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] },
    u: { range: [0, 1.05] },
  };
  opts.axes = [
    { label: "round", size: 36, labelSize: 14 },
    { label: "cycle (s)", scale: "s", size: 46, labelSize: 14 },
    { label: "utilisation", scale: "u", side: 1, size: 50, labelSize: 14, grid: { show: false } },
  ];
  return new uPlot(opts, [[], [], [], []], box);
}

function drawCycle(x, last) {
  const c = last.cycle;
  $("cycleSection").hidden = !c;
  if (!c) return;
  if (!charts.cycle) charts.cycle = makeCycleChart();
  charts.cycle.setData([x,
    samples.map(s => s.cycle ? s.cycle.cycle_ns / 1e9 : null),
    samples.map(s => s.cycle ? s.cycle.memory_utilisation : null),
    samples.map(s => s.cycle ? s.cycle.time_utilisation : null)]);
  const byLength = c.streams_by_group_rounds.map(([g, n]) => n + " at " + g).join(", ");
  let lastOp = "none yet";
  if (c.last_event) {
    const [round, e] = c.last_event;
    lastOp = e.op + (e.streams ? " streams " + e.streams.join(", ") : e.stream !== undefined ? " stream " + e.stream : "") +
      (e.to_rounds ? " to " + e.to_rounds + " rounds" : e.group_rounds ? " to " + e.group_rounds + " rounds" : "") +
      " at round " + round;
  }
  $("cycleText").textContent = "cycle " + c.group_rounds + " rounds (" + (c.cycle_ns / 1e9).toFixed(2) + " s); streams by rounds per read: " +
    (byLength || "none") + "; operations: " + c.combines + " combines, " + c.splits + " splits, " + c.doubles + " doubles, " +
    c.halves + " halves, " + c.refusals + " refused; last: " + lastOp;
}

// Seed 002's tiers: each tier's drives and queue, the staging jobs with
// their progress against the predicted delay, and the totals.
function drawTiers(last) {
  const t = last.staging;
  $("tierSection").hidden = !t;
  if (!t) return;
  const mb = b => (b / 1e6).toFixed(1) + " MB";
  const tiers = t.tiers.map(x => x.name + " (" + x.kind + "): " +
    (x.drives_total ? x.drives_busy + "/" + x.drives_total + " drives busy, " + x.exchanges_total + " exchanges, " +
      x.cache_hits_total + " cache hits, " : "") +
    (x.measured_bytes_per_s ? (x.measured_bytes_per_s / 1e6).toFixed(1) + " MB/s measured, " : "") +
    x.fetches_active + " fetching, " + mb(x.fetched_bytes_total) + " fetched, " + x.fetch_failures_total + " failed").join("; ");
  const finished = t.staged_total;
  const mean = finished ? " mean delay " + (t.delay_seconds_sum / finished).toFixed(1) + " s against " +
    (t.predicted_seconds_sum / finished).toFixed(1) + " s predicted;" : "";
  $("tierText").textContent = tiers + ". Staged " + finished + ",;" + mean + " evicted " + t.evictions_total +
    ", failed " + t.failures_total + ".";
  const body = document.querySelector("#tierJobs tbody");
  body.innerHTML = "";
  for (const j of t.jobs) {
    const row = document.createElement("tr");
    const phase = typeof j.phase === "string" ? j.phase : "failed: " + j.phase.failed.error;
    for (const text of [j.name, j.tier, phase,
      mb(j.fetched_bytes) + " / " + mb(j.object_bytes),
      mb(j.written_bytes) + " / " + mb(j.stored_bytes),
      j.elapsed_seconds.toFixed(1) + " s / " + j.predicted_seconds.toFixed(1) + " s"]) {
      const cell = document.createElement("td");
      cell.textContent = text;
      row.appendChild(cell);
    }
    body.appendChild(row);
  }
  if (t.jobs.length === 0) body.innerHTML = '<tr><td colspan="6">nothing being staged</td></tr>';
}

function countState(s, state) {
  return s.disks.filter(d => d.state === state).length;
}

function frac(ns, s) {
  return ns / (s.round_ns * Math.max(1, s.rounds));
}

function redraw() {
  if (samples.length === 0) return;
  const last = samples[samples.length - 1];
  if (!charts || last.disks.length !== diskCount) {
    diskCount = last.disks.length;
    charts = makeCharts(diskCount);
  }
  const x = samples.map(s => s.round);
  charts.disks.forEach((chart, d) => {
    chart.setData([
      x,
      samples.map(s => s.disks[d] ? frac(s.disks[d].reserved_ns, s) : null),
      samples.map(s => s.disks[d] ? frac(s.disks[d].measured_busy_ns, s) : null),
      samples.map(s => s.disks[d] ? frac(s.disks[d].model_busy_ns, s) : null),
    ]);
  });
  drawCycle(x, last);
  drawTiers(last);
  charts.streams.setData([x, samples.map(s => s.active_streams)]);
  charts.admissions.setData([x, samples.map(s => s.admitted), samples.map(rejected)]);
  charts.misses.setData([x, samples.map(s => s.misses), samples.map(s => s.overruns)]);
  charts.health.setData([x, samples.map(s => countState(s, 2)), samples.map(s => countState(s, 1)),
    samples.map(s => countState(s, 3)),
    samples.map(s => s.rebuild && s.rebuild.total_bytes > 0 ? 100 * s.rebuild.done_bytes / s.rebuild.total_bytes : null)]);
  const mib = 1024 * 1024;
  charts.buffers.setData([x, samples.map(s => s.buffer_bytes_in_use / mib),
    samples.map(s => s.sent_bytes / mib / Math.max(1, s.rounds))]);

  $("round").textContent = last.round;
  $("active").textContent = last.active_streams;
  $("admitted").textContent = totals.admitted;
  $("rejected").textContent = totals.rejected;
  $("misses").textContent = totals.misses;
  $("overruns").textContent = totals.overruns;
  $("sent").textContent = fmtBytes(totals.sent);
  $("disks").innerHTML = last.disks.map((d, i) => {
    const state = STATES[d.state] || ("state " + d.state);
    // A cluster's disk: the storage node that reads it.
    const node = diskNodes[i] ? " on " + diskNodes[i].replace(/[<>&"]/g, "") : "";
    return '<span class="disk s' + d.state + '" title="errors ' + d.errors + '">disk ' + i + node + ": " + state + "</span>";
  }).join("");
  const rb = last.rebuild;
  if (rb) {
    const pct = rb.total_bytes > 0 ? (100 * rb.done_bytes / rb.total_bytes) : 0;
    $("rebuild").innerHTML = "rebuilding disk " + rb.disk + ': <progress max="100" value="' + pct.toFixed(1) +
      '"></progress> ' + pct.toFixed(1) + "% (" + fmtBytes(rb.done_bytes) + " of " + fmtBytes(rb.total_bytes) + ")";
  } else {
    $("rebuild").textContent = "no rebuild running";
  }
  document.body.dataset.points = String(samples.length);
  document.title = "rondo dashboard: " + samples.length + " rounds, " + last.active_streams + " streams";
}

function add(s) {
  samples.push(s);
  if (samples.length > MAX_ROUNDS) samples.shift();
  totals.admitted += s.admitted;
  totals.rejected += rejected(s);
  totals.misses += s.misses;
  totals.overruns += s.overruns;
  totals.sent += s.sent_bytes;
}

function reset(list, state) {
  samples.length = 0;
  for (const k in totals) totals[k] = 0;
  list.forEach(add);
  $("conn").textContent = state;
  $("conn").className = "stat live";
  redraw();
}

// Which storage node reads each disk (a cluster's manager; none otherwise),
// and the stroke admission charges (refreshed: an upload may widen it).
function showStroke(j) {
  const s = j.charged_stroke;
  if (!s) return;
  $("stroke").textContent = s.stroke === "data"
    ? "admission charges the data's stroke: " + s.charged_profile + " (" + s.stroke_percent +
      "% of the cylinders; widened " + s.widened + "×, refused " + s.refused + "×)"
    : "admission charges the whole stroke (" + s.charged_profile + ")";
}
function pollDisks() {
  fetch("/api/disks")
    .then(r => r.json())
    .then(j => { diskNodes = (j.disks || []).map(d => d.node || ""); showStroke(j); redraw(); })
    .catch(() => {})
    .finally(() => setTimeout(pollDisks, 10000));
}
pollDisks();

// A cluster's manager (rondo serve --etcd): every node it sees in etcd,
// refreshed every 2 s; the section stays hidden on a single server (404).
function esc(t) { return String(t).replace(/[<>&"]/g, c => "&#" + c.charCodeAt(0) + ";"); }
function showCluster(j) {
  document.getElementById("clusterSection").hidden = false;
  const rows = (j.managers || []).map(m =>
    "<tr><td>" + esc(m.address === j.this_manager.address ? j.this_manager.id + " (this one)" : "") +
    "</td><td>manager: " + esc(m.role) + "</td><td>" + esc(m.address) + "</td><td></td></tr>");
  for (const n of j.nodes || []) {
    rows.push("<tr><td>" + esc(n.id) + "</td><td>" + esc(n.role) + "</td><td>" + esc(n.address) +
      "</td><td>" + esc((n.disks || []).join(", ")) + "</td></tr>");
  }
  document.querySelector("#clusterNodes tbody").innerHTML = rows.join("");
  document.getElementById("clusterNote").textContent = "cluster " + j.cluster + " in etcd " +
    (j.etcd || []).join(", ") + "; this manager's epoch " + j.this_manager.epoch +
    (j.error ? "; etcd not answering: " + j.error : "");
}
function pollCluster() {
  fetch("/api/cluster")
    .then(r => r.ok ? r.json() : null)
    .then(j => { if (j) { showCluster(j); setTimeout(pollCluster, 2000); } })
    .catch(() => setTimeout(pollCluster, 5000));
}
pollCluster();

// Live: the event stream. `?snapshot`: the history once, no live updates
// (a page that finishes loading, for screenshots and printing).
function connect() {
  if (new URLSearchParams(location.search).has("snapshot")) {
    fetch("/api/history")
      .then(r => r.json())
      .then(list => reset(list, "snapshot (reload for newer rounds)"))
      .catch(e => { $("conn").textContent = "failed: " + e; $("conn").className = "stat down"; });
    return;
  }
  const events = new EventSource("/api/events");
  events.addEventListener("history", e => reset(JSON.parse(e.data), "live"));
  events.addEventListener("round", e => { add(JSON.parse(e.data)); redraw(); });
  events.addEventListener("lagged", e => console.warn("skipped " + e.data + " rounds"));
  events.onerror = () => { $("conn").textContent = "disconnected (retrying)"; $("conn").className = "stat down"; };
}

window.addEventListener("resize", () => {
  if (!charts) return;
  const all = charts.disks.concat([charts.streams, charts.admissions, charts.misses, charts.buffers, charts.health])
    .concat(charts.cycle ? [charts.cycle] : []);
  all.forEach(c => c.setSize({ width: chartWidth(c.root.parentElement), height: c.height }));
});

connect();
