/* The Due panel: per org, its charts on time, at risk and late; the charts at risk or late,
 * least slack first, with why, "1–100 of 861": the snapshot's first 100 (due.charts) over
 * all orgs, or, filtered by org or state or paged, a page of /dashboard/due.json, fetched
 * again with each new snapshot. It renders each time the dashboard does (dashboard.js sends
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

  const LIMIT = 100;
  const view = {org: null, state: null, offset: 0};
  let page = null, asked = null, last = null;   // the fetched page, what it was asked for, the last render's args
  const query = () => JSON.stringify([view.org, view.state, view.offset]);
  const filtered = () => view.org != null || view.state != null || view.offset > 0;

  /* The charts to list and how many there are: the snapshot's first ones, or a fetched page
   * (asked again when the view or the snapshot changes; meanwhile the last one stays). */
  function listed(S) {
    const due = S.due || {}, c = due.counts || {};
    if (!filtered()) {
      return {charts: due.charts || [], total: due.total != null ? due.total : (c.at_risk || 0) + (c.late || 0)};
    }
    const want = query() + "@" + S.seq;
    if (asked !== want) {
      asked = want;
      const q = new URLSearchParams({offset: view.offset, limit: LIMIT});
      if (view.org != null) q.set("org", view.org);
      if (view.state) q.set("state", view.state);
      fetch("/dashboard/due.json?" + q, {credentials: "same-origin"}).then((r) => r.json()).then((got) => {
        if (asked !== want) return;
        page = {...got, key: query()};
        if (last) render(...last);
      }).catch(() => {});
    }
    return page && page.key === query() ? page : {charts: [], total: null};
  }

  function renderPager(S, total, shown) {
    const sel = $("due-org");
    const orgs = (S.orgs || []).filter((o) => o.due && (o.due.at_risk || o.due.late));
    const want = ['<option value="">all orgs</option>'].concat(orgs.map((o) =>
      `<option value="${o.id}">${esc(o.name)} (${(o.due.at_risk || 0) + (o.due.late || 0)})</option>`)).join("");
    if (sel.dataset.sig !== want) { sel.innerHTML = want; sel.dataset.sig = want; }
    sel.value = view.org == null ? "" : String(view.org);
    $("due-prev").disabled = view.offset <= 0;
    $("due-next").disabled = total == null || view.offset + LIMIT >= total;
    const what = (view.state ? LABEL[view.state] : "at risk or late") +
      (view.org != null ? ", " + ((S.orgs || []).find((o) => o.id === view.org) || {name: "org " + view.org}).name : "");
    const text = total == null ? "loading…" : total === 0 ? `none ${what}`
      : `${(view.offset + 1).toLocaleString()}–${(view.offset + shown).toLocaleString()} of ${total.toLocaleString()} ${what}`;
    if ($("due-range").textContent !== text) $("due-range").textContent = text;
  }

  function render(S, can, control) {
    last = [S, can, control];
    const due = S.due || {};
    const orgs = (S.orgs || []).filter((o) => o.due && (o.due.on_time || o.due.at_risk || o.due.late));
    const list = listed(S);
    const charts = list.charts || [];
    $("due-empty").hidden = orgs.length > 0;
    $("due-body").hidden = orgs.length === 0;
    $("due-pager").hidden = orgs.length === 0;
    renderPager(S, list.total, charts.length);
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

  function move(change) {
    Object.assign(view, change);
    if (last) render(...last);
  }
  $("due-org").addEventListener("change", (ev) => move({org: ev.target.value ? Number(ev.target.value) : null, offset: 0}));
  $("due-state").addEventListener("change", (ev) => move({state: ev.target.value || null, offset: 0}));
  $("due-prev").addEventListener("click", () => move({offset: Math.max(0, view.offset - LIMIT)}));
  $("due-next").addEventListener("click", () => move({offset: view.offset + LIMIT}));

  document.addEventListener("fairsched:state", (ev) => render(ev.detail.state, ev.detail.can, ev.detail.control));
})();
