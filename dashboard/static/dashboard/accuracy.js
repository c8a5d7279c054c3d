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
    tr.innerHTML = `<td></td><td class="num">${fig.first.n}</td>${cells(fig.first)}${cells(fig.dispatch)}`;
    tr.firstChild.textContent = label;  // org names are user data: text, never HTML
    return tr;
  }

  function render(d) {
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
    const clock = (v) => new Date(v).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
    if (plot) { plot.data = data; plot.update("none"); return; }
    plot = new Chart(document.getElementById("plot-accuracy"), {type: "scatter", data, options: {
      animation: false, maintainAspectRatio: false,
      scales: {x: {title: {display: true, text: "actual finish"}, ticks: {callback: clock}},
               y: {title: {display: true, text: "predicted finish"}, ticks: {callback: clock}}},
    }});
  }

  function load() {
    fetch(url, {credentials: "same-origin"}).then((r) => (r.ok ? r.json() : null))
      .then((d) => { if (d) render(d); }).catch(() => {});
  }
  load();
  setInterval(load, 30000);
})();
