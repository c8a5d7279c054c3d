/* What-if previews (/dashboard/whatif.json): each org's clear-time and at-risk count before and
 * after a change, shown while the operator types, before "Set" (the dashboard) or "Save" (the
 * admin's org, cost and settings forms); for Hold / Release, while the button is pointed at or
 * focused, before it is pressed. Changes nothing: the scheduler computes it on a copy.
 * Static, no inline script (CSP); needs live.js (FairLive.clock) loaded before it, as every page
 * that loads it does. */
(function () {
  "use strict";
  const URL_ = "/dashboard/whatif.json";
  const esc = (v) => String(v == null ? "" : v).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  // The pages' one time format (live.js, loaded first by the dashboard and the admin): 24 h
  // "14:05", "Nov 30 14:05" when not today; never the locale's 12 h "02:05 PM".
  const when = (iso) => (iso == null ? "no clear-time" : FairLive.clock(FairLive.parseIso(iso)));
  const names = () => {
    const m = new Map();
    document.querySelectorAll("[data-org-id][data-org-name]").forEach((el) => m.set(String(el.dataset.orgId), el.dataset.orgName));
    return m;
  };
  const timers = new WeakMap();
  let seq = 0;

  function region(id, after) {
    let el = document.getElementById(id);
    if (!el && after) {
      el = document.createElement("div");
      el.id = id;
      el.className = "whatif";
      el.setAttribute("role", "status");
      el.setAttribute("aria-live", "polite");
      el.hidden = true;
      after.insertAdjacentElement("afterend", el);
    }
    return el;
  }

  function render(out, body, label) {
    if (body.error || body.title) {
      out.innerHTML = `<p class="whatif-error"><strong>Preview unavailable.</strong> ${esc(body.detail || body.error)}</p>`;
      out.dataset.state = body.status === 503 ? "unavailable" : "error";
      return;
    }
    const n = names();
    // An org is listed when its clear-time as shown (to the minute) or its at-risk count
    // changes; a cell that does not change says "unchanged", never "05:55 → 05:55" or "0 → 0".
    const moved = (a, b) => (a === b ? "unchanged" : `${a} → ${b}`);
    const rows = Object.entries(body.orgs)
      .map(([id, r]) => [id, moved(when(r.clear_before), when(r.clear_after)), moved(r.at_risk_before, r.at_risk_after)])
      .filter(([, clearText, riskText]) => clearText !== "unchanged" || riskText !== "unchanged")
      .map(([id, clearText, riskText]) => `<tr data-preview-org="${esc(id)}"><td>${esc(body.orgs[id].name || n.get(id) || "org " + id)}</td><td>${clearText}</td>
        <td class="num">${riskText}</td></tr>`).join("");
    out.innerHTML = `<p><strong>Preview</strong> (${esc(label)}, not applied): clear-time <span data-preview="clear">${when(body.clear_before)} → ${when(body.clear_after)}</span>;
      at risk <span data-preview="at-risk">${body.at_risk_before} → ${body.at_risk_after}</span>.</p>` +
      (rows ? `<table class="t whatif-orgs"><caption>Orgs that change</caption><thead><tr><th scope="col">org</th><th scope="col">clear-time</th><th scope="col" class="num">at risk</th></tr></thead><tbody>${rows}</tbody></table>`
            : `<p class="muted">No org's clear-time or at-risk count changes.</p>`);
    out.dataset.state = "ready";
  }

  function preview(out, query, label) {
    const mine = ++seq;
    out.dataset.query = new URLSearchParams(query).toString();
    out.hidden = false;
    out.dataset.state = "loading";
    out.innerHTML = `<p class="muted">Previewing ${esc(label)}…</p>`;
    fetch(URL_ + "?" + new URLSearchParams(query), {credentials: "same-origin"})
      .then((r) => r.json().then((b) => ({...b, status: r.status})))
      .catch(() => ({error: "the request failed", status: 0}))
      .then((body) => { if (mine === seq) render(out, body, label); });
  }

  function later(inp, fn) {
    clearTimeout(timers.get(inp));
    timers.set(inp, setTimeout(fn, 400));
  }

  function clear(out) { if (out) { out.hidden = true; out.innerHTML = ""; delete out.dataset.query; } }

  document.addEventListener("input", (ev) => {
    const inp = ev.target;
    if (!(inp instanceof HTMLInputElement)) return;
    const v = inp.value.trim();
    let out = null, query = null, label = "";
    if (inp.id === "budget-input" || inp.id === "id_budget") {
      out = region("whatif-budget", inp.id === "budget-input" ? document.getElementById("budget-form") : inp.closest(".form-row") || inp);
      query = {budget: v}; label = `budget ${v}`;
    } else if (inp.matches("input[data-pool-input]")) {  // a pool's dial (pools.js): its capacity
      const pool = inp.dataset.poolInput;
      out = region(`whatif-pool-${pool}`, inp.closest("form.pool-form"));
      query = {pool, capacity: v}; label = `pool ${pool} capacity ${v}`;
    } else if ((inp.id === "id_max" || inp.id === "id_min") && /\/admin\/orgs\/orgpoollimit\//.test(location.pathname)) {
      // the admin's limit form: an org's ceiling or minimum in a pool (its org and pool from the form)
      const pick = (id) => { const el = document.getElementById(id); return el ? el.value.trim() : ""; };
      const org = pick("id_org"), pool = pick("id_pool");
      if (!org || !pool) return;  // nothing to preview until both are given
      const key = inp.id === "id_max" ? "max" : "min";
      out = region("whatif-limit", inp.closest(".form-row") || inp);
      query = {org, pool, [key]: v}; label = `${key === "max" ? "ceiling" : "minimum"} ${v} in pool ${pool}`;
    } else if (inp.matches("input[data-field=weight]") || (inp.id === "id_weight" && document.body.dataset.whatifOrg)) {
      const row = inp.closest("[data-org-id]");
      const org = row ? row.dataset.orgId : document.body.dataset.whatifOrg;
      out = region("whatif-orgs", row ? document.getElementById("orgs") : inp.closest(".form-row") || inp);
      query = {org, weight: v}; label = `weight ${v}` + (row && row.dataset.orgName ? ` for ${row.dataset.orgName}` : "");
    } else if (inp.matches("input[data-field=cost]")) {
      const row = inp.closest("[data-org-id]");
      out = region("whatif-orgs", document.getElementById("orgs"));
      query = {org: row.dataset.orgId, workflow: inp.dataset.workflow, cost: v}; label = `cost ${v}`;
    } else if (inp.id === "id_cost" || /^costs-\d+-cost$/.test(inp.id.replace(/^id_/, ""))) {
      // the admin's cost forms: a WorkflowCost row's (its org and workflow selects), or the org form's inline row
      const pick = (id) => { const el = document.getElementById(id); return el ? el.value : ""; };
      const org = inp.id === "id_cost" ? pick("id_org") : document.body.dataset.whatifOrg;
      const workflow = pick(inp.id.replace(/cost$/, "workflow"));
      if (!org || !workflow) return;  // nothing to preview until both are chosen
      out = region("whatif-cost", inp.id === "id_cost" ? inp.closest(".form-row") || inp : inp.closest(".inline-group") || inp);
      query = {org, workflow, cost: v}; label = `cost ${v}`;
    } else return;
    if (v === "" || v === inp.defaultValue) { clearTimeout(timers.get(inp)); clear(out); return; }
    later(inp, () => preview(out, query, label));
  });

  // Escape puts the shown value back (dashboard.js): the preview of the typed one goes with it.
  document.addEventListener("keydown", (ev) => {
    const inp = ev.target;
    if (ev.key !== "Escape" || !(inp instanceof HTMLInputElement)) return;
    const id = inp.id === "budget-input" ? "whatif-budget" : inp.matches("input[data-field]") ? "whatif-orgs"
      : inp.matches("input[data-pool-input]") ? `whatif-pool-${inp.dataset.poolInput}` : null;
    if (id) { clearTimeout(timers.get(inp)); clear(document.getElementById(id)); }
  });

  // Hold / Release on the dashboard: previewed while the pointer or the focus is on the button,
  // before it is pressed (the press applies it, as "Set" does).
  function holdPreview(ev) {
    const b = ev.target.closest && ev.target.closest("button[data-action=hold], button[data-action=release]");
    const row = b && b.closest("[data-org-id]");
    if (!row) return;
    const hold = b.dataset.action === "hold" ? "1" : "0";
    const out = region("whatif-orgs", document.getElementById("orgs"));
    const query = {org: row.dataset.orgId, hold};
    if (out.dataset.query === new URLSearchParams(query).toString() && !out.hidden) return;  // shown already
    const label = `${b.dataset.action} ${row.dataset.orgName || "org " + row.dataset.orgId}`;
    later(out, () => preview(out, query, label));
  }
  document.addEventListener("mouseover", holdPreview);
  document.addEventListener("focusin", holdPreview);
  document.addEventListener("mouseout", (ev) => {  // a pointer passing over the button asks nothing
    const b = ev.target.closest && ev.target.closest("button[data-action=hold], button[data-action=release]");
    const out = document.getElementById("whatif-orgs");
    if (b && out && !b.contains(ev.relatedTarget) && b !== document.activeElement) clearTimeout(timers.get(out));
  });

  // The capacity planner (the budget card): the smallest budget for a clear-by time, or the due times.
  function plan(query, label) {
    const out = document.getElementById("plan-result");
    if (!out) return;
    out.hidden = false;
    out.dataset.state = "loading";
    out.textContent = `Planning (${label})…`;
    fetch(URL_ + "?" + new URLSearchParams(query), {credentials: "same-origin"})
      .then((r) => r.json().then((b) => ({...b, status: r.status})))
      .catch(() => ({error: "the request failed", status: 0}))
      .then((b) => {
        if (b.status !== 200) {
          out.dataset.state = b.status === 503 ? "unavailable" : "error";
          out.textContent = (b.status === 503 ? "Plan unavailable: " : "") + (b.detail || b.error);
          return;
        }
        out.dataset.state = "ready";
        out.textContent = b.budget == null ? b.message
          : `${b.message}; clear-time then ${when(b.clear_after)} (searched in ${b.probes} ETA passes).`;
      });
  }
  const pf = document.getElementById("plan-form");
  if (pf) {
    pf.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const v = document.getElementById("plan-clear-by").value;
      if (v) plan({clear_by: new Date(v).toISOString()}, "clear by " + when(new Date(v).toISOString()));
    });
    document.getElementById("plan-meet-due").addEventListener("click", () => plan({meet_due: "1"}, "every due time"));
  }

  // The admin's org change form: the org's id from the URL (/admin/orgs/org/<id>/change/).
  const m = location.pathname.match(/\/admin\/orgs\/org\/(\d+)\/change\/$/);
  if (m) document.body.dataset.whatifOrg = m[1];
  // After "Set" the preview is spent: the next snapshot shows the real thing.
  document.addEventListener("submit", (ev) => {
    if (ev.target.id === "budget-form") clear(document.getElementById("whatif-budget"));
    if (ev.target.matches && ev.target.matches("form.pool-form")) clear(document.getElementById(`whatif-pool-${ev.target.dataset.pool}`));
  });
  document.addEventListener("click", (ev) => {
    if (ev.target.closest && ev.target.closest("button[data-action=set_weight], button[data-action=hold], button[data-action=release]")) {
      clearTimeout(timers.get(document.getElementById("whatif-orgs")));
      clear(document.getElementById("whatif-orgs"));
    }
  });
})();
