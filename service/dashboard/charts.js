// The page's time series (uPlot, vendored in this folder): polls /v1/timeline and /v1/drift of the model picked in
// #model-select (the server's default at first), and /v1/shadow, every 5 s.
// Each chart's element says how many points it draws (data-points) and how many event markers (loads, reloads,
// rollout steps, promotions, rollbacks) it shows (data-markers), so a headless browser test can check them.
// Uses $ and getJSON from app.js.
"use strict";

const COLORS = ["#2b6cb0", "#c05621", "#2f855a", "#9b2c2c", "#6b46c1", "#b7791f", "#2c7a7b", "#97266d"];
const charts = {};
let events = [];

// how each event kind is marked: loads and reloads dashed red; a rollout's steps blue, its promotion green, its
// rollback (and a stopped rollout) solid red (service/rollout/events.py names the kinds)
const MARKS = {
  rollout: ["#2b6cb0", [2, 3]], step: ["#2b6cb0", [2, 3]], traffic: ["#2b6cb0", [2, 3]],
  promote: ["#2f855a", []], rollback: ["#c53030", []], "rollout-stop": ["#c53030", []],
};

function markers(u) {
  // vertical lines at model loads, reloads and rollout events inside the plotted range
  const ctx = u.ctx, [lo, hi] = [u.scales.x.min, u.scales.x.max];
  ctx.save();
  for (const e of events) {
    if (e.t < lo || e.t > hi) continue;
    const [color, dash] = MARKS[e.kind] || ["#c53030", [4, 3]];
    ctx.strokeStyle = color;
    ctx.setLineDash(dash);
    const x = Math.round(u.valToPos(e.t, "x", true));
    ctx.beginPath();
    ctx.moveTo(x, u.bbox.top);
    ctx.lineTo(x, u.bbox.top + u.bbox.height);
    ctx.stroke();
  }
  ctx.restore();
}

function draw(id, t, series, unit, step) {
  // series: [{label, values}]; recreated when the set of series changes, else only its data
  const el = $(id), labels = series.map((s) => s.label).join("|");
  const data = [t, ...series.map((s) => s.values)];
  let chart = charts[id];
  if (!chart || chart.labels !== labels) {
    if (chart) chart.plot.destroy();
    const opts = {
      width: Math.max(el.clientWidth, 420), height: 220,
      // one bucket of room on the right, so the newest (still filling) bucket is not drawn on the edge
      scales: { x: { time: true, range: (u, lo, hi) => [lo, hi + step] } },
      series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: COLORS[i % COLORS.length], width: 1.5, points: { show: true, size: 4 } }))],
      axes: [{}, { label: unit, size: 60 }],
      hooks: { draw: [markers] },
    };
    chart = charts[id] = { plot: new uPlot(opts, data, el), labels };
  } else {
    chart.plot.setData(data);
  }
  const points = series.reduce((n, s) => n + s.values.filter((v) => v !== null && v !== undefined).length, 0);
  el.dataset.points = String(points);
  el.dataset.markers = String(events.filter((e) => e.t >= t[0] && e.t <= t[t.length - 1] + step).length);
}

function modelOptions(tl) {
  // the selector lists every model with a series; the server's choice (the default model) until one is picked
  const select = $("model-select"), names = tl.models.includes(tl.model) || !tl.model ? tl.models : [tl.model, ...tl.models];
  if ([...select.options].map((o) => o.value).join("|") !== names.join("|")) {
    const keep = select.value || tl.model;
    select.replaceChildren(...names.map((n) => new Option(n, n)));
    select.value = names.includes(keep) ? keep : tl.model;
  }
}

function renderShadow(pairs) {
  $("shadow").hidden = pairs.length === 0;
  const fixed = (v, digits = 3) => (v === null || v === undefined ? "–" : v.toFixed(digits));
  $("shadow-window").textContent = pairs.length ? pairs[0].window_documents : "–";
  $("shadow-pairs").tBodies[0].replaceChildren(...pairs.map((p) => {
    const tr = document.createElement("tr");
    tr.dataset.pair = `${p.model}|${p.shadow}`;
    const live = p.live && p.live.documents ? `${fixed(p.live[p.model]["P@1"], 2)} / ${fixed(p.live[p.shadow]["P@1"], 2)} (${p.live.documents} docs)` : "–";
    for (const text of [p.model, p.shadow, p.documents, p.shed_documents, p.errors, fixed(p.top1_agreement), fixed(p.overlap_at_k), fixed(p.rank_correlation), live]) {
      const td = document.createElement("td");
      td.textContent = String(text);
      tr.append(td);
    }
    return tr;
  }));
}

// Models with several versions (GET /v1/models): each version's weight and state, the stable one starred.
function renderVersions(models) {
  const split = models.filter((m) => m.versions && m.versions.length > 1 && m.state !== "unloaded");
  $("versions").hidden = split.length === 0;
  $("version-rows").tBodies[0].replaceChildren(...split.flatMap((m) => m.versions.map((v) => {
    const tr = document.createElement("tr");
    tr.dataset.version = `${m.name}|${v.version}`;
    tr.dataset.weight = v.weight;
    const star = m.traffic && m.traffic.stable === v.version ? " *" : "";
    const bundle = v.bundle ? `${v.bundle} ${v.bundle_version}` : (v.error || "–");
    for (const text of [m.name, v.version + star, `${v.weight} %`, v.state, bundle]) {
      const td = document.createElement("td");
      td.textContent = String(text);
      tr.append(td);
    }
    return tr;
  })));
}

function renderTimeline(tl) {
  events = tl.events;
  const t = tl.t, names = Object.keys(tl.endpoints).sort();
  const select = $("tl-endpoint");
  if ([...select.options].map((o) => o.value).join("|") !== names.join("|")) {
    const keep = select.value;
    select.replaceChildren(...names.map((n) => new Option(n, n)));
    select.value = names.includes(keep) ? keep : (names.includes("/v1/predict") ? "/v1/predict" : names[0] || "");
  }
  const nonZero = (v) => v.map((x) => (x ? x : null));
  draw("chart-qps", t, names.map((n) => ({ label: n, values: nonZero(tl.endpoints[n].qps) })), "req/s", tl.step_s);
  const ep = tl.endpoints[select.value];
  draw("chart-latency", t, ep ? ["p50", "p90", "p99"].map((p) => ({ label: p, values: ep[p] })) : [], "ms", tl.step_s);
  draw("chart-errors", t, names.flatMap((n) => [
    { label: `errors ${n}`, values: tl.endpoints[n].error_rate },
    { label: `503 ${n}`, values: tl.endpoints[n].unavailable_rate },
  ]), "share", tl.step_s);
  draw("chart-batch", t, [{ label: "mean", values: tl.batch.mean }, { label: "max", values: tl.batch.max }], "documents", tl.step_s);
  $("events").replaceChildren(...events.slice(-10).reverse().map((e) => {
    const li = document.createElement("li");
    li.dataset.event = e.kind;
    li.textContent = `${new Date(e.t * 1000).toLocaleTimeString()} ${e.kind}: ${e.text}`;
    return li;
  }));
}

function labelList(id, rows) {
  $(id).replaceChildren(...rows.map((r) => {
    const li = document.createElement("li");
    li.dataset.label = r.name;
    li.textContent = r.name;
    const share = document.createElement("span");
    share.textContent = `${(100 * r.served_share).toFixed(2)} % vs ${(100 * r.train_share).toFixed(2)} %`;
    li.append(share);
    return li;
  }));
}

function renderDrift(d) {
  $("drift-window").textContent = d.window_labels;
  setFigure("drift-js", d.js_divergence, d.js_divergence === null ? "–" : d.js_divergence.toFixed(3));
  $("drift-bands").tBodies[0].replaceChildren(...Object.entries(d.bands).map(([band, v]) => {
    const tr = document.createElement("tr");
    for (const text of [band, v.served === null ? "–" : `${(100 * v.served).toFixed(1)} %`, `${(100 * v.train).toFixed(1)} %`]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    return tr;
  }));
  labelList("drift-risers", d.risers);
  labelList("drift-fallers", d.fallers);
}

async function pollCharts() {
  try {
    const picked = $("model-select").value, model = picked ? `model=${encodeURIComponent(picked)}&` : "";
    const tl = await getJSON(`/v1/timeline?${model}minutes=60`);
    modelOptions(tl);
    renderTimeline(tl);
    renderDrift(await getJSON(`/v1/drift?${model}top=5`));
    renderShadow((await getJSON("/v1/shadow")).pairs);
    renderVersions((await getJSON("/v1/models")).models);
  } catch (e) {
    $("tl-note").textContent = e.message;
  }
}

$("tl-endpoint").addEventListener("change", pollCharts);
$("model-select").addEventListener("change", pollCharts);
pollCharts();
setInterval(pollCharts, 5000);
