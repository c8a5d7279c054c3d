/* An org's status page: its charts, positions, ETAs and clear-time, live. */
(function () {
  "use strict";
  const F = window.FairLive;
  const esc = F.esc;
  const init = JSON.parse(document.getElementById("initial").textContent);
  let st = init.status;
  const view = {offset: 0, limit: st.limit || 200};
  const $ = (id) => document.getElementById(id);
  const LABEL = {ordered: "queued", queued: "queued", held: "held", paused: "paused", blocked: "blocked", running: "running", cancelled: "cancelled"};

  function render() {
    const o = st.org || {};
    const live = st.source === "scheduler";
    $("waiting").hidden = live;
    F.showStale($("stale"), st);
    $("org-queued").textContent = o.queued == null ? "—" : Number(o.queued).toLocaleString();
    $("org-running").textContent = o.running == null ? "—" : Number(o.running).toLocaleString();
    $("org-held").hidden = !o.held;
    // with capacity pools: its use of each against its ceiling ("llm 4 of 4 (ceiling)")
    const pools = (live && o.pools) || [];
    $("org-pools").hidden = !pools.length;
    $("org-pools").textContent = pools.length ? "Pools in use: " + pools.map((u) => u.text).join(", ") : "";
    const clear = F.parseIso(o.clear_at);
    // Held, paused or blocked charts never finish at today's settings: say so, never "nothing queued".
    $("clear-when").textContent = !live ? "—" : o.clear_s == null ? (o.no_eta ? "no ETA" : "—")
      : o.clear_s === 0 ? (o.no_eta ? "no ETA" : "nothing queued") : F.clock(clear);
    $("clear-in").setAttribute("data-eta", live && o.clear_s ? clear : "");
    if (!live) $("clear-in").textContent = "waiting for the scheduler";
    $("clear-note").hidden = !(live && o.no_eta);
    $("clear-note").textContent = live && o.no_eta ? o.no_eta : "";
    const total = st.total || 0;
    $("range").textContent = total ? `${st.offset + 1}–${Math.min(total, st.offset + st.charts.length)} of ${total.toLocaleString()}` : "none queued or running";
    $("prev").disabled = st.offset <= 0;
    $("next").disabled = st.offset + st.limit >= total;
    $("charts-body").innerHTML = (st.charts || []).map((c) => {
      const start = F.parseIso(c.start_at), p90 = F.parseIso(c.eta_p90);
      // a running chart's finish is its start plus the duration estimate: past it, "overdue by"
      const running = c.state === "running" && start != null && c.expected_s != null;
      const eta = running ? start + c.expected_s : F.parseIso(c.eta);
      return `<tr data-chart-id="${c.id}" data-state="${esc(c.state)}"><td class="mono">${esc(c.external_id || "—")} <span class="muted">#${c.id}</span></td>
        <td>${esc(c.workflow)}</td><td><span class="badge ${esc(c.state)}">${esc(LABEL[c.state] || c.state)}</span>${c.priority ? ' <span class="badge prio">priority</span>' : ""}</td>
        <td class="num">${c.position == null ? "—" : (c.position + 1).toLocaleString()}</td>
        <td>${start ? F.clock(start) : "—"}</td><td>${eta ? F.clock(eta) : "—"}</td><td class="muted">${p90 ? F.clock(p90) : "—"}</td>
        <td class="muted" data-eta="${eta == null ? "" : eta}"${running ? " data-overdue" : ""}></td>
        <td class="waits">${c.waits ? esc(c.waits) : ""}</td></tr>`;
    }).join("");
    F.tick();
  }

  function onMessage(msg) {
    if ((msg.type === "snapshot" || msg.type === "order") && msg.state) { st = msg.state; render(); }
    else if (msg.type === "events") {
      (msg.events || []).forEach((ev) => {
        if (ev.kind === "chart" && ev.chart) {
          (st.charts || []).forEach((c) => {
            if (c.id !== ev.chart.id) return;
            if (ev.chart.state !== "queued") c.state = ev.chart.state === "running" ? "running" : "cancelled";
            else c.state = ev.chart.paused ? "paused" : (c.state === "paused" ? "queued" : c.state);
          });
        } else if (ev.kind === "org" && ev.org_row) st.org.held = ev.org_row.held;
      });
      render();
    }
  }
  const live = F.connect(init.ws_path, {onMessage});
  $("prev").addEventListener("click", () => { view.offset = Math.max(0, view.offset - view.limit); live.send({type: "view", ...view}); });
  $("next").addEventListener("click", () => { view.offset += view.limit; live.send({type: "view", ...view}); });
  render();
})();
