// xtag dashboard: polls /v1/stats and /v1/model once a second; the form posts to /v1/predict.
// With `explain` on (the default) each label lists its words and the selected one's are marked in the text.
// ?q=TEXT (with optional &k=, &scheme=, &alpha=, &explain=0) fills the form and tags the text on load (shareable links).
"use strict";

const $ = (id) => document.getElementById(id);
const keyInput = $("api-key");
keyInput.value = localStorage.getItem("xtag-api-key") || "";
keyInput.addEventListener("change", () => localStorage.setItem("xtag-api-key", keyInput.value));

function headers(json) {
  const h = json ? { "Content-Type": "application/json" } : {};
  if (keyInput.value) h["X-API-Key"] = keyInput.value;
  return h;
}

async function getJSON(url) {
  const r = await fetch(url, { headers: headers(false), cache: "no-store" });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.detail || `${url}: HTTP ${r.status}`);
  return body;
}

function setFigure(id, value, text) {
  const el = $(id);
  el.dataset.value = value === null || value === undefined ? "" : String(value);
  el.textContent = text !== undefined ? text : (value === null || value === undefined ? "–" : String(value));
}

function setStatus(text, ok) {
  const el = $("status");
  el.textContent = text;
  el.className = "pill " + (ok ? "ok" : "bad");
}

function renderStats(s) {
  setFigure("qps", s.qps, s.qps.toFixed(2));
  for (const p of ["p50", "p90", "p99"]) {
    const v = s.latency_ms[p];
    setFigure(p, v, v === null ? "–" : v.toFixed(2));
  }
  setFigure("error-rate", s.error_rate, (100 * s.error_rate).toFixed(1) + " %");
  setFigure("requests", s.requests);
  $("errors").textContent = `4xx ${s.errors_4xx} · 5xx ${s.errors_5xx}`;
  $("in-flight").textContent = s.in_flight;
  $("window").textContent = `last ${s.window_s} s`;
  const ol = $("top-labels");
  ol.replaceChildren(...s.top_labels.map((l) => {
    const li = document.createElement("li");
    li.dataset.label = l.name;
    li.dataset.count = l.count;
    li.textContent = l.name;
    const c = document.createElement("span");
    c.textContent = l.count;
    li.append(c);
    return li;
  }));
}

function renderModel(m) {
  $("model-name").textContent = `${m.name} · ${m.version}`;
  $("m-name").textContent = m.name;
  $("m-version").textContent = m.version;
  $("m-kind").textContent = m.kind;
  $("m-labels").textContent = m.label_count;
  $("m-labels").dataset.value = m.label_count;
  $("m-beam").textContent = m.default_beam_size;
  $("m-load").textContent = `${(1000 * m.load_seconds).toFixed(0)} ms (warm-up ${m.warmup_ms.toFixed(1)} ms)`;
  $("m-created").textContent = (m.manifest && m.manifest.created) || "–";
}

let modelVersion = null;
async function poll() {
  try {
    const s = await getJSON("/v1/stats");
    renderStats(s);
    if (s.model && s.model.version !== modelVersion) {
      renderModel(await getJSON("/v1/model"));
      modelVersion = s.model.version;
    }
    setStatus(s.model ? "serving" : "no model", !!s.model);
    document.body.dataset.loaded = "1";
  } catch (e) {
    setStatus(e.message, false);
  }
}

async function postPredict(body) {
  const r = await fetch("/v1/predict", { method: "POST", headers: headers(true), body: JSON.stringify(body) });
  return { r, out: await r.json() };
}

// The clicked label's words highlighted in the text that was tagged (explain.js).
function showWhy(text, labels, index) {
  const label = labels[index];
  const rows = $("try-results").querySelectorAll("tbody tr");
  rows.forEach((tr, i) => tr.classList.toggle("selected", i === index));
  $("try-why").hidden = !label || !label.explanation;
  if (!label || !label.explanation) return;
  $("try-why-label").textContent = label.name;
  XtagExplain.highlight($("try-highlight"), text, label);
}

async function tag(event) {
  if (event) event.preventDefault();
  const text = $("try-text").value;
  const body = { text, k: parseInt($("try-k").value, 10) };
  if ($("try-scheme").value) body.reweight = { scheme: $("try-scheme").value, alpha: parseFloat($("try-alpha").value) };
  if ($("try-explain").checked) body.explain = true;
  const err = $("try-error");
  const tbody = $("try-results").querySelector("tbody");
  const note = $("try-explain-note");
  note.textContent = "";
  try {
    let { r, out } = await postPredict(body);
    if (r.status === 422 && out.type === "urn:xtag:problem:explain-unavailable") {
      note.textContent = "· no explanations: this bundle has no TF-IDF features";
      delete body.explain;
      ({ r, out } = await postPredict(body));
    }
    if (!r.ok) throw new Error(out.detail || `HTTP ${r.status}`);
    err.hidden = true;
    tbody.replaceChildren(...out.labels.map((l, i) => {
      const tr = document.createElement("tr");
      tr.dataset.label = l.name;
      const name = document.createElement("td");
      name.textContent = l.name;
      const score = document.createElement("td");
      score.className = "score";
      score.textContent = l.score.toFixed(4);
      const words = document.createElement("td");
      words.className = "words";
      words.textContent = l.explanation ? XtagExplain.wordsText(l) : "";
      tr.append(name, score, words);
      tr.addEventListener("click", () => showWhy(text, out.labels, i));
      return tr;
    }));
    showWhy(text, out.labels, 0);
    $("try-took").textContent = `${out.took_ms.toFixed(2)} ms server time · ${out.model.name} ${out.model.version}`;
    $("try-results").dataset.count = out.labels.length;
  } catch (e) {
    err.textContent = e.message;
    err.hidden = false;
    tbody.replaceChildren();
    $("try-why").hidden = true;
  }
}

$("try-form").addEventListener("submit", tag);
const params = new URLSearchParams(location.search);
if (params.get("q")) {
  $("try-text").value = params.get("q");
  if (params.get("k")) $("try-k").value = params.get("k");
  if (params.get("scheme")) $("try-scheme").value = params.get("scheme");
  if (params.get("alpha")) $("try-alpha").value = params.get("alpha");
  if (params.get("explain") === "0") $("try-explain").checked = false;
  tag();
}
poll();
setInterval(poll, 1000);
