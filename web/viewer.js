// The checkpoint viewer: reads dropped files in the page and shows them through ortckpt's core
// compiled to WebAssembly (pkg/, built by scripts/build_web.sh). Every number shown comes from
// the core (values, statistics, histogram, diff); this file only lays them out. Each cell keeps
// the exact number in data-value (what sorting and the browser tests read) and shows it rounded.

import init, * as ortckpt from "./pkg/ortckpt_wasm.js";

const HISTOGRAM_BINS = 50;
const PREVIEW_VALUES = 20;

const $ = (id) => document.getElementById(id);
const body = document.body;

// The open checkpoints: [{file, checkpoint, tensors, stats}], one or two.
let loaded = [];
let shown = 0;
let loads = 0;

function setState(state) {
  body.dataset.state = state;
}

function showError(messages) {
  const box = $("error");
  box.replaceChildren(...messages.map((m) => Object.assign(document.createElement("p"), { textContent: m })));
  box.hidden = messages.length === 0;
}

function fmt(x) {
  if (x === null || x === undefined) return "";
  if (typeof x === "bigint") return x.toString();
  if (typeof x !== "number") return String(x);
  if (Number.isNaN(x)) return "NaN";
  if (Number.isInteger(x) && Math.abs(x) < 1e15) return String(x);
  return String(Number(x.toPrecision(6))); // 6 significant digits, no trailing zeros
}

function cell(value, { text, numeric = false } = {}) {
  const td = document.createElement("td");
  td.dataset.value = value === null || value === undefined ? "" : String(value);
  td.textContent = text !== undefined ? text : fmt(value);
  if (numeric) td.className = "num";
  return td;
}

function row(cells, attrs = {}) {
  const tr = document.createElement("tr");
  tr.append(...cells);
  for (const [k, v] of Object.entries(attrs)) tr.dataset[k] = v;
  return tr;
}

// --- loading -------------------------------------------------------------------------------------

function readAll(files) {
  return Promise.all([...files].map(async (f) => ({ name: f.name, bytes: new Uint8Array(await f.arrayBuffer()) })));
}

// ORT names a checkpoint's external data file "<checkpoint name>.data".
function pairFiles(files) {
  const data = files.filter((f) => f.name.endsWith(".data"));
  const checkpoints = files.filter((f) => !f.name.endsWith(".data"));
  const used = new Set();
  const pairs = checkpoints.map((c) => {
    const ext = data.find((d) => d.name === `${c.name}.data`);
    if (ext) used.add(ext);
    return { file: c, external: ext };
  });
  const spare = data.filter((d) => !used.has(d));
  if (pairs.length === 1 && !pairs[0].external && spare.length === 1) pairs[0].external = spare[0];
  return pairs;
}

async function openFiles(fileList) {
  setState("loading");
  const errors = [];
  try {
    const files = await readAll(fileList);
    const pairs = pairFiles(files);
    if (pairs.length === 0) throw new Error("no checkpoint among the dropped files (only .data files)");
    if (pairs.length > 2) throw new Error(`drop one or two checkpoints, not ${pairs.length}`);
    for (const entry of loaded) entry.checkpoint.free();
    loaded = [];
    for (const { file, external } of pairs) {
      try {
        const checkpoint = ortckpt.Checkpoint.open(
          file.bytes,
          external ? external.bytes : undefined,
          `${file.name}.data (drop it together with the checkpoint)`,
        );
        const tensors = checkpoint.tensors();
        const stats = tensors.map((t) => checkpoint.stats(t.index, HISTOGRAM_BINS));
        loaded.push({ file, external, checkpoint, tensors, stats });
      } catch (e) {
        errors.push(`${file.name}: ${e.message}`);
      }
    }
  } catch (e) {
    errors.push(e.message);
  }
  showError(errors);
  shown = 0;
  render();
  loads += 1;
  body.dataset.loads = String(loads);
  setState(errors.length ? "error" : "loaded");
}

// --- rendering -----------------------------------------------------------------------------------

function render() {
  $("loaded").hidden = loaded.length === 0;
  $("detail").hidden = true;
  renderSummaries();
  const nav = $("which-nav");
  nav.hidden = loaded.length < 2;
  loaded.forEach((entry, i) => {
    $(`which-${i}`).textContent = entry.file.name;
  });
  document.querySelector('input[name="which"][value="0"]').checked = true;
  renderDiff();
  renderShown();
}

function renderSummaries() {
  $("summaries").replaceChildren(
    ...loaded.map((entry, i) => {
      const c = entry.checkpoint;
      const p = document.createElement("p");
      p.className = "summary";
      p.dataset.file = entry.file.name;
      const parts = [
        `${loaded.length > 1 ? "ab"[i] + ": " : ""}${entry.file.name}`,
        `format version ${c.version}`,
        `${entry.tensors.length} tensors`,
        c.isNominal ? "nominal" : null,
        c.hasExternalData ? `external data: ${entry.external.name}` : null,
      ];
      p.textContent = parts.filter(Boolean).join(" · ");
      return p;
    }),
  );
}

function renderShown() {
  const entry = loaded[shown];
  if (!entry) return;
  renderTensors(entry);
  renderOptimizer(entry);
  renderProperties(entry);
}

function renderTensors(entry) {
  const tbody = $("tensors").tBodies[0];
  tbody.replaceChildren(
    ...entry.tensors.map((t, i) => {
      const s = entry.stats[i];
      const inf = s ? s.posInf + s.negInf : null;
      const tr = row(
        [
          cell(t.key),
          cell(t.kind),
          cell(t.dtype),
          cell(`[${t.shape.join(", ")}]`), // dims past 2^53 are BigInts: joined, never rounded
          cell(t.size, { numeric: true }),
          cell(s && s.min, { numeric: true }),
          cell(s && s.max, { numeric: true }),
          cell(s && s.mean, { numeric: true }),
          cell(s && s.std, { numeric: true }),
          cell(s && s.nan, { numeric: true }),
          cell(inf, { numeric: true }),
        ],
        { key: t.key, kind: t.kind, index: String(t.index) },
      );
      tr.addEventListener("click", () => showTensor(entry, i));
      return tr;
    }),
  );
}

function renderOptimizer(entry) {
  const groups = entry.checkpoint.optimizerGroups();
  $("optimizer").tBodies[0].replaceChildren(
    ...groups.map((g) =>
      row(
        [
          cell(g.name),
          cell(g.step, { numeric: true }),
          cell(g.initialLearningRate, { numeric: true }),
          cell(g.states.length, { numeric: true }),
          cell(g.states.reduce((n, s) => n + s.momentums.length, 0), { numeric: true }),
        ],
        { group: g.name },
      ),
    ),
  );
}

function renderProperties(entry) {
  $("properties").tBodies[0].replaceChildren(
    ...entry.checkpoint.properties().map((p) =>
      row([cell(p.name), cell(p.type), cell(p.value, { text: p.type === "string" ? p.value : fmt(p.value) })], {
        name: p.name,
      }),
    ),
  );
}

function renderDiff() {
  const section = $("diff-section");
  section.hidden = loaded.length !== 2;
  if (loaded.length !== 2) return;
  const [a, b] = loaded;
  const changes = ortckpt.diffCheckpoints(a.checkpoint, b.checkpoint);
  $("diff-title").textContent = `a: ${a.file.name} → b: ${b.file.name}`;
  const count = (status) => changes.filter((c) => c.status === status).length;
  $("diff-summary").textContent =
    `${count("changed")} of ${changes.length} tensors changed, ${count("same")} unchanged, ` +
    `${count("added")} added, ${count("removed")} removed, ${count("dtype") + count("shape")} with another type or shape`;
  $("diff").tBodies[0].replaceChildren(
    ...changes.map((c) => {
      const compared = c.status === "same" || c.status === "changed";
      const notCompared = compared ? {} : { text: "—" };
      const tr = row(
        [
          cell(c.key),
          cell(c.section),
          cell(c.status),
          cell(c.changedElements, { numeric: true, ...notCompared }),
          cell(c.maxAbsDiff, { numeric: true, ...notCompared }),
          cell(c.relL2, { numeric: true, ...notCompared }),
        ],
        { key: c.key, section: c.section, status: c.status },
      );
      tr.className = `status-${c.status}`;
      return tr;
    }),
  );
  applyDiffFilter();
}

function applyDiffFilter() {
  const only = $("diff-changed-only").checked;
  for (const tr of $("diff").tBodies[0].rows) tr.hidden = only && tr.dataset.status === "same";
}

function showTensor(entry, i) {
  const t = entry.tensors[i];
  const s = entry.stats[i];
  $("detail").hidden = false;
  $("detail-name").textContent = t.key;
  const facts = [
    ["dtype", t.dtype],
    ["shape", `[${t.shape.join(", ")}]`],
    ["storage", t.storage],
  ];
  if (s) {
    for (const k of ["count", "finite", "nan", "posInf", "negInf", "min", "max", "mean", "std"]) facts.push([k, s[k]]);
  }
  $("detail-stats").replaceChildren(
    ...facts.flatMap(([k, v]) => {
      const dt = Object.assign(document.createElement("dt"), { textContent: k });
      const dd = Object.assign(document.createElement("dd"), { textContent: fmt(v) });
      dd.dataset.stat = k;
      dd.dataset.value = String(v);
      return [dt, dd];
    }),
  );
  let preview = "";
  try {
    const values = entry.checkpoint.values(t.index);
    if (values === null) preview = "(nominal: no values)";
    else {
      const first = Array.from(values.slice(0, PREVIEW_VALUES), fmt);
      preview = `[${first.join(", ")}${values.length > PREVIEW_VALUES ? ", …" : ""}]`;
    }
  } catch (e) {
    showError([`${entry.file.name}: ${e.message}`]);
  }
  $("detail-values").textContent = preview;
  drawHistogram(s);
  $("detail").scrollIntoView({ block: "nearest" });
}

function drawHistogram(s) {
  const canvas = $("histogram");
  const ctx = canvas.getContext("2d");
  const { width, height } = canvas;
  ctx.clearRect(0, 0, width, height);
  canvas.dataset.counts = s ? JSON.stringify(s.counts) : "";
  ctx.fillStyle = "#555";
  ctx.font = "12px sans-serif";
  if (!s || s.counts.length === 0) {
    ctx.fillText("no finite values to plot", 10, height / 2);
    return;
  }
  const pad = 24;
  const top = Math.max(...s.counts);
  const w = (width - 2 * pad) / s.counts.length;
  ctx.fillStyle = "#3b6ea5";
  s.counts.forEach((n, i) => {
    const h = top ? ((height - 2 * pad) * n) / top : 0;
    ctx.fillRect(pad + i * w, height - pad - h, Math.max(w - 1, 1), h);
  });
  ctx.fillStyle = "#222";
  ctx.fillText(fmt(s.edges[0]), pad, height - 6);
  const last = fmt(s.edges[s.edges.length - 1]);
  ctx.fillText(last, width - pad - ctx.measureText(last).width, height - 6);
  ctx.fillText(`max count ${top}`, pad, 14);
}

// --- sorting -------------------------------------------------------------------------------------

function sortBy(table, th) {
  const col = [...th.parentNode.children].indexOf(th);
  const numeric = th.classList.contains("num");
  const descending = th.dataset.sorted === "asc";
  for (const other of th.parentNode.children) delete other.dataset.sorted;
  th.dataset.sorted = descending ? "desc" : "asc";
  const key = (tr) => tr.cells[col].dataset.value;
  const rows = [...table.tBodies[0].rows];
  rows.sort((r, s) => {
    let order;
    if (numeric) {
      const [x, y] = [parseFloat(key(r)), parseFloat(key(s))];
      // Empty and NaN last, whichever the direction.
      if (Number.isNaN(x) || Number.isNaN(y)) return Number.isNaN(x) - Number.isNaN(y);
      order = x - y;
    } else {
      order = key(r).localeCompare(key(s));
    }
    return descending ? -order : order;
  });
  table.tBodies[0].append(...rows);
}

for (const table of document.querySelectorAll("table.sortable")) {
  for (const th of table.tHead.rows[0].cells) th.addEventListener("click", () => sortBy(table, th));
}

// --- events --------------------------------------------------------------------------------------

$("files").addEventListener("change", (e) => {
  if (e.target.files.length) openFiles(e.target.files);
  e.target.value = "";
});
const drop = $("drop");
for (const name of ["dragenter", "dragover"]) {
  window.addEventListener(name, (e) => {
    e.preventDefault();
    drop.classList.add("over");
  });
}
window.addEventListener("dragleave", () => drop.classList.remove("over"));
window.addEventListener("drop", (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  if (e.dataTransfer.files.length) openFiles(e.dataTransfer.files);
});
for (const radio of document.querySelectorAll('input[name="which"]')) {
  radio.addEventListener("change", () => {
    shown = Number(radio.value);
    $("detail").hidden = true;
    renderShown();
  });
}
$("diff-changed-only").addEventListener("change", applyDiffFilter);
window.addEventListener("error", (e) => showError([String(e.message)]));
window.addEventListener("unhandledrejection", (e) => showError([String(e.reason && e.reason.message)]));

// The module's exports, for scripting the page (and the browser tests of the JS API).
window.ortckpt = ortckpt;
try {
  await init();
  $("status").textContent = "Ready: nothing is uploaded; files are read in this page.";
  setState("ready");
} catch (e) {
  $("status").textContent = `The WebAssembly module did not load: ${e.message}`;
  setState("broken");
}
