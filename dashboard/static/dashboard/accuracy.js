// The dashboard's ETA accuracy panel: /dashboard/accuracy.json every 30 s (figures and a
// predicted-vs-actual plot). Kept apart from dashboard.js; needs Chart.js (vendor/).
(function () {
  "use strict";
  const panel = document.getElementById("accuracy");
  if (!panel) return;
  const url = panel.dataset.url;
  const body = document.getElementById("acc-body");
  let plot = null;

  function dur(s, signed) {
    if (s === null || s === undefined) return "—";
    const a = Math.abs(s);
    const sign = signed ? (s > 0 ? "+" : s < 0 ? "−" : "") : "";
    if (a < 90) return sign + a.toFixed(0) + " s";
    if (a < 5400) return sign + (a / 60).toFixed(1) + " min";
    return sign + (a / 3600).toFixed(1) + " h";
  }

  function cells(f) {
    return [f.median_abs_s, f.p90_abs_s].map((v) => `<td class="num">${dur(v, false)}</td>`).join("")
      + `<td class="num">${dur(f.bias_s, true)}</td>`;
  }

  function row(label, fig, cls) {
    const tr = document.createElement("tr");
    if (cls) tr.className = cls;
    const within = fig.p90 && fig.p90.within != null ? Math.round(fig.p90.within * 100) + "%" : "—";
    tr.innerHTML = `<td></td><td class="num">${fig.first.n}</td>${cells(fig.first)}${cells(fig.dispatch)}`
      + `<td class="num">${within}</td>`;
    tr.firstChild.textContent = label;  // org names are user data: text, never HTML
    return tr;
  }

  function renderDue(w) {
    const el = document.getElementById("acc-due");
    if (!el || !w || !w.finished) return;
    const p = (x) => (x == null ? "—" : Math.round(x * 100) + "%");
    const h = (s) => (s == null ? "—" : (s / 3600).toFixed(1) + " h");
    const late = w.late || {};
    el.textContent = `Due warnings, last ${w.finished} finished charts with a due time: ${w.missed} missed. ` +
      `Late warning (ETA after the due time): recall ${p(late.recall)} (missed charts warned at least ` +
      `${h(late.lead_min_s)} ahead), precision ${p(late.precision)} (of ${late.flagged} warned, the share that ` +
      `missed); median lead ${h(late.lead_median_s)}. Early warning (at risk or late): recall ${p(w.recall)}, ` +
      `precision ${p(w.precision)} (of ${w.flagged} warned); median lead ${h(w.lead_median_s)}.`;
  }

  function render(d) {
    renderDue(d.due);
    document.getElementById("acc-n").textContent = d.n;
    if (!d.n) return;
    body.replaceChildren(row("all orgs", d, "total"));
    for (const [id, o] of Object.entries(d.orgs)) {
      const tr = row(o.name, o, "");
      tr.dataset.org = id;
      body.appendChild(tr);
    }
    if (!window.Chart) return;
    const pts = (k) => d.points.filter((p) => p[k]).map((p) => ({x: Date.parse(p.actual), y: Date.parse(p[k])}));
    const first = pts("first"), disp = pts("dispatch");
    const xs = first.map((p) => p.x);
    const lo = Math.min(...xs), hi = Math.max(...xs);
    const data = {datasets: [
      {label: "first ETA", data: first, backgroundColor: "#9aa3b2", pointRadius: 2},
      {label: "ETA at dispatch", data: disp, backgroundColor: "#2f6fed", pointRadius: 2},
      {label: "exact", type: "line", data: [{x: lo, y: lo}, {x: hi, y: hi}], borderColor: "#d33", borderWidth: 1,
       pointRadius: 0},
    ]};
    if (plot) {
      plot.data = data;
      for (const axis of ["x", "y"]) plot.options.scales[axis].ticks.stepSize = timeStep(plot.data, axis);
      plot.update("none");
      return;
    }
    plot = new Chart(document.getElementById("plot-accuracy"), {type: "scatter", data, options: {
      animation: false, maintainAspectRatio: false,
      scales: {x: {title: {display: true, text: "actual finish"}, ticks: {callback: clock, stepSize: timeStep(data, "x")}},
               y: {title: {display: true, text: "predicted finish"}, ticks: {callback: clock, stepSize: timeStep(data, "y")}}},
    }});
  }

  /* The time axes: a tick every whole 1, 2, 5, 10, 15 or 30 min, or hours, at most about 8
   * of them, each labelled like every other time on the pages (24 h, as FairLive.clock). Chart.js
   * alone put ticks at round numbers of milliseconds, several within one minute: "07:46 PM"
   * three times. */
  const STEPS_MIN = [1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080];
  function timeStep(data, axis) {
    const vs = data.datasets.flatMap((d) => d.data.map((p) => p[axis]));
    const span = vs.length ? Math.max(...vs) - Math.min(...vs) : 0;
    const min = STEPS_MIN.find((m) => span / (m * 60000) <= 8) || STEPS_MIN[STEPS_MIN.length - 1];
    return min * 60000;
  }
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  // "20:41"; the first tick and the first of each new day name the day when it is not today ("Jan 5 20:40")
  function clock(v, i, ticks) {
    const d = new Date(v);
    const hm = String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0");
    const before = i > 0 && ticks ? new Date(ticks[i - 1].value) : null;
    const newDay = before ? before.toDateString() !== d.toDateString() : d.toDateString() !== new Date().toDateString();
    return newDay ? MONTHS[d.getMonth()] + " " + d.getDate() + " " + hm : hm;
  }

  function load() {
    fetch(url, {credentials: "same-origin"}).then((r) => (r.ok ? r.json() : null))
      .then((d) => { if (d) render(d); }).catch(() => {});
  }
  load();
  setInterval(load, 30000);
})();
