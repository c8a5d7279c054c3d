/* The Due panel: per org, its charts on time, at risk and late; the charts at risk or late,
 * least slack first, with why. It renders each time the dashboard does (dashboard.js sends
 * "fairsched:state" with the snapshot summary), so it is as live as the rest. */
(function () {
  "use strict";
  const F = window.FairLive;
  const esc = F.esc;
  const $ = (id) => document.getElementById(id);
  const LABEL = {on_time: "on time", at_risk: "at risk", late: "late"};
  const slack = (s) => {
    if (s == null) return '<span class="muted">no ETA</span>';
    const a = Math.abs(s), sign = s < 0 ? "−" : "";
    return sign + (a < 5400 ? (a / 60).toFixed(0) + " min" : (a / 3600).toFixed(1) + " h");
  };

  function render(S, can, control) {
    const due = S.due || {};
    const orgs = (S.orgs || []).filter((o) => o.due && (o.due.on_time || o.due.at_risk || o.due.late));
    const charts = due.charts || [];
    $("due-empty").hidden = orgs.length > 0;
    $("due-body").hidden = orgs.length === 0;
    const c = due.counts || {};
    $("due-summary").textContent = orgs.length
      ? `${c.at_risk || 0} at risk · ${c.late || 0} late · ${c.on_time || 0} on time`
      : "charts at risk of missing their due time, and late";
    const names = new Map((S.orgs || []).map((o) => [o.id, o]));
    $("due-orgs-body").innerHTML = orgs
      .sort((a, b) => (b.due.late - a.due.late) || (b.due.at_risk - a.due.at_risk) || a.name.localeCompare(b.name))
      .map((o) => `<tr data-org-id="${o.id}"><td><a href="/orgs/${esc(o.slug)}/">${esc(o.name)}</a></td>
        <td class="num">${o.due.on_time || 0}</td><td class="num">${o.due.at_risk || 0}</td><td class="num">${o.due.late || 0}</td>
        <td>${can && can.has("prioritize_at_risk") && (o.due.at_risk || o.due.late)
          ? `<button type="button" data-due-action="prioritize_at_risk" aria-label="Prioritise at risk: ${esc(o.name)}, its at-risk and late charts">Prioritise at risk</button>` : ""}</td></tr>`)
      .join("");
    $("due-charts-body").innerHTML = charts.map((r) => {
      const o = names.get(r.org) || {name: String(r.org)};
      const when = S.now == null || r.due_s == null ? "—" : F.clock(S.now + r.due_s);
      return `<tr class="due-${esc(r.state)}"><td><a href="/charts/${r.id}/">#${r.id}</a>${r.external_id ? " " + esc(r.external_id) : ""}</td>
        <td>${esc(o.name)}</td><td><span class="badge due-${esc(r.state)}">${LABEL[r.state] || esc(r.state)}</span></td>
        <td>${when}</td><td class="num">${slack(r.slack_s)}</td><td>${esc(r.reason || "")}</td></tr>`;
    }).join("");
    $("due-orgs-body").onclick = (ev) => {
      const b = ev.target.closest("[data-due-action]");
      if (!b || !control) return;
      control({action: b.dataset.dueAction, org: Number(b.closest("tr").dataset.orgId)});
    };
  }

  document.addEventListener("fairsched:state", (ev) => render(ev.detail.state, ev.detail.can, ev.detail.control));
})();
