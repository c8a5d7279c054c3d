/* The staff dashboard: renders the scheduler's snapshot, applies events, sends controls. */
(function () {
  "use strict";
  const F = window.FairLive;
  const esc = F.esc;
  const init = JSON.parse(document.getElementById("initial").textContent);
  let S = init.state;            // the snapshot summary (or its DB stand-in)
  let O = init.order;            // the page of the order this page looks at
  let C = init.costs;            // workflows and (org, workflow) costs
  const can = new Set(init.actions);
  const view = {offset: O.offset || 0, limit: O.limit || 100, org: O.org || null, state: O.state || null};
  let patches = [];              // recent control events, re-applied over older snapshots
  let confirmKey = null, confirmTimer = null;
  let reqSeq = 0;
  const pending = new Map();
  const $ = (id) => document.getElementById(id);

  // ---------------------------------------------------------------- helpers
  const orgById = () => { const m = new Map(); (S.orgs || []).forEach((o) => m.set(o.id, o)); return m; };
  const at = (seconds) => (seconds == null || S.now == null ? null : S.now + seconds);
  const pct = (x) => (x == null ? "—" : (x * 100).toFixed(0) + "%");
  const fmt = (n) => (n == null ? "—" : Number(n).toLocaleString());
  const chartUrl = (id) => init.chart_url.replace("/0/", "/" + id + "/");
  const STATE_LABEL = {ordered: "queued", held: "held", paused: "paused", blocked: "blocked", running: "running", cancelled: "cancelled"};

  /* Rows are keyed and patched cell by cell, so live updates reach every row, the one the
   * operator is acting on too: a cell that changed is replaced and, if it held the focus, the
   * focus moves to the same control in the new cell (the button that was "Hold" is now
   * "Release"). The one exception is a cell with an input the operator has typed into
   * (data-dirty): it keeps what they typed until they send it or put it back. */
  const tmpl = document.createElement("tbody");
  let pressed = null;              // the element under a mouse button held down
  document.addEventListener("pointerdown", (ev) => { pressed = ev.target; }, true);
  document.addEventListener("pointerup", () => { setTimeout(() => { pressed = null; render(); }, 0); }, true);
  function patchRow(tr, html) {
    tmpl.innerHTML = "<tr>" + html + "</tr>";
    const fresh = Array.from(tmpl.firstChild.children);
    const old = Array.from(tr.children);
    if (old.length !== fresh.length) {
      old.forEach((td) => td.remove());
      fresh.forEach((td) => { td._sig = td.innerHTML; tr.appendChild(td); });
      return;
    }
    fresh.forEach((td, i) => {
      const cur = old[i];
      const sig = td.innerHTML;
      if (cur._sig === sig) return;
      if (cur.querySelector("[data-dirty]")) return;
      if (pressed && cur.contains(pressed)) return;   // mid-click: replaced after the click lands
      const focused = cur.contains(document.activeElement) ? document.activeElement : null;
      td._sig = sig;
      cur.replaceWith(td);
      if (focused) refocus(td, focused);
    });
  }
  function refocus(cell, was) {
    const same = (was.dataset.action && cell.querySelector(`[data-action="${was.dataset.action}"]`))
      || (was.dataset.field && cell.querySelector(`[data-field="${was.dataset.field}"]`))
      || cell.querySelector("button, input, select, a");
    if (same) same.focus({preventScroll: true});
  }

  function syncRows(tbody, items, keyOf, rowHtml, decorate) {
    // The focus in this table: kept on its control when the row moves (a paused chart goes to
    // the order's tail) and, when the row leaves the page (a filter, the next page), handed to
    // the matching control of the row that takes its place, never dropped to <body>.
    const had = tbody.contains(document.activeElement) ? document.activeElement : null;
    const hadRow = had && had.closest("tr");
    const hadIndex = hadRow ? Array.prototype.indexOf.call(tbody.children, hadRow) : -1;
    const existing = new Map();
    Array.from(tbody.children).forEach((tr) => existing.set(tr.dataset.key, tr));
    const keep = new Set();
    let prev = null;
    items.forEach((it) => {
      const k = String(keyOf(it));
      keep.add(k);
      let tr = existing.get(k);
      if (!tr) { tr = document.createElement("tr"); tr.dataset.key = k; }
      const html = rowHtml(it);
      if (tr.dataset.sig !== html) { patchRow(tr, html); tr.dataset.sig = html; }
      if (decorate) decorate(tr, it);
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (want !== tr) tbody.insertBefore(tr, want);
      prev = tr;
    });
    existing.forEach((tr, k) => { if (!keep.has(k)) tr.remove(); });
    if (had && document.activeElement !== had && !tbody.contains(document.activeElement)) keepFocus(tbody, had, hadIndex);
  }
  function keepFocus(tbody, was, index) {
    if (was.isConnected) { was.focus({preventScroll: true}); return; }
    const rows = tbody.children;
    const row = rows.length ? rows[Math.min(index, rows.length - 1)] : null;
    if (row) {  // the control in the same place: the same action, else the same cell's n-th control
      const FOCUSABLE = "button, input, select, a";
      const cell = was.closest("td"), oldRow = was.closest("tr");
      const at = cell && oldRow ? row.children[Array.prototype.indexOf.call(oldRow.children, cell)] : null;
      const nth = cell ? Array.prototype.indexOf.call(cell.querySelectorAll(FOCUSABLE), was) : -1;
      const same = (was.dataset.action && row.querySelector(`[data-action="${was.dataset.action}"]`))
        || (at && (at.querySelectorAll(FOCUSABLE)[nth] || at.querySelector(FOCUSABLE))) || row.querySelector(FOCUSABLE);
      if (same) { same.focus({preventScroll: true}); return; }
    }
    const region = tbody.closest("[tabindex]");   // an empty table: its scrolling region
    if (region) region.focus({preventScroll: true});
  }

  function btn(action, label, key) {
    if (!can.has(action)) return "";
    const confirming = action === "cancel" && confirmKey === key;
    return `<button type="button" data-action="${action}"${confirming ? ' class="confirm"' : ""}>${confirming ? "Confirm cancel" : label}</button>`;
  }

  // ---------------------------------------------------------------- rendering
  /* The policies in force (the snapshot's, or the database's before one): the text, and the
   * form's fields unless the operator is changing them. */
  function renderPolicies(p) {
    if (!p) return;
    $("policy-text").textContent = `policy: share ${p.share}` +
      (p.share === "work" ? ` (quantum ${p.quantum_s} s)` : "") + `, dispatch ${p.dispatch}`;
    const legend = $("share-legend");  // what fairness counts under the share in force
    const text = legend.dataset[p.share === "work" ? "legendWork" : "legendCharts"];
    if (text && legend.textContent !== text) legend.textContent = text;
    const form = $("policies-form");
    if (form.dataset.dirty) return;
    $("share-select").value = p.share;
    $("dispatch-select").value = p.dispatch;
    $("quantum-input").value = p.quantum_s;
  }

  function renderSummary() {
    const live = S.source === "scheduler";
    $("waiting").hidden = live;
    F.showStale($("stale"), S);
    $("seq").textContent = live ? "snapshot #" + S.seq + " · " + F.clock(F.parseIso(S.generated_at)) : "no snapshot";
    const used = S.used || 0, budget = S.budget || 0;
    const frac = budget ? Math.min(1, used / budget) : (used ? 1 : 0);
    const arc = $("dial-arc");
    const len = arc.getTotalLength ? arc.getTotalLength() : 251;
    arc.style.strokeDasharray = `${len * frac} ${len}`;
    arc.style.stroke = used > budget ? "#c0262d" : frac > 0.85 ? "#c98a04" : "#2f6fed";
    $("dial-text").textContent = `${fmt(used)} / ${fmt(budget)}`;
    const inp = $("budget-input");
    if (!inp.dataset.dirty) { inp.value = budget; inp.defaultValue = String(budget); }
    renderPolicies(S.policies);
    const c = S.counters || {};
    ["queued", "ordered", "running", "held", "paused", "blocked"].forEach((k) => {
      const el = document.querySelector(`[data-counter="${k}"]`);
      if (el) el.textContent = fmt(c[k]);
    });
    const clear = S.clear_at ? F.parseIso(S.clear_at) : at(S.clear_s);
    // Held, paused or blocked charts never finish at today's settings: never call that "clear".
    $("clear-when").textContent = live ? (S.clear_s === 0 ? (S.no_eta ? "no ETA" : "clear") : F.clock(clear)) : "—";
    $("clear-in").setAttribute("data-eta", live && S.clear_s ? clear : "");
    if (!live) $("clear-in").textContent = "waiting for the scheduler";
    $("clear-note").hidden = !(live && S.no_eta);
    $("clear-note").textContent = live && S.no_eta ? S.no_eta : "";
    const waiting = $("dispatch-waiting");
    waiting.hidden = !(live && S.waiting);
    waiting.textContent = live && S.waiting ? S.waiting.text : "";
  }

  /* An org's clear-time; held, paused and blocked charts are named, never "clear". */
  function clearCell(o, clear) {
    const note = o.no_eta ? `<span class="no-eta">${esc(o.no_eta)}</span>` : "";
    if (o.clear_s == null) return note || '<span class="muted">—</span>';
    if (o.clear_s === 0) return note || "clear";
    return `${F.clock(clear)} <span class="muted" data-eta="${clear}"></span>${note ? " " + note : ""}`;
  }

  function renderOrgs() {
    const rows = (S.orgs || []).slice().sort((a, b) => (b.queued + b.running) - (a.queued + a.running) || a.name.localeCompare(b.name));
    syncRows($("orgs-body"), rows, (o) => "o" + o.id, (o) => {
      const clear = o.clear_at ? F.parseIso(o.clear_at) : at(o.clear_s);
      const weightCell = can.has("set_weight")
        ? `<input class="small" type="number" min="0" step="1" data-field="weight" value="${o.held ? 0 : o.weight}" aria-label="weight of ${esc(o.name)}"> <button type="button" data-action="set_weight">Set</button>`
        : `${o.weight}`;
      return `<td><a href="/orgs/${esc(o.slug)}/">${esc(o.name)}</a> ${o.held ? '<span class="badge held">held</span>' : ""}</td>
        <td>${weightCell}</td>
        <td>${o.held ? btn("release", "Release") : btn("hold", "Hold")}</td>
        <td class="num">${fmt(o.queued)}</td><td class="num">${fmt(o.running)}</td>
        <td><div class="share" title="budget in use ${pct(o.share_budget)} · share of weight ${pct(o.share_weight)}">
          <div class="bar b"><span data-w="${Math.min(100, (o.share_budget || 0) * 100)}"></span></div>
          <div class="bar w"><span data-w="${Math.min(100, (o.share_weight || 0) * 100)}"></span></div></div></td>
        <td class="num">${pct(o.share_budget)} <span class="muted">/ ${pct(o.share_weight)}</span></td>
        <td>${clearCell(o, clear)}</td>`;
    }, (tr, o) => {
      tr.dataset.orgId = o.id; tr.dataset.orgName = o.name; tr.className = o.held ? "held" : "";
      // Widths through the CSSOM: a style="" attribute in markup is inline style, refused by the CSP.
      tr.querySelectorAll("[data-w]").forEach((el) => { el.style.width = `${el.dataset.w}%`; });
    });
    const sel = $("org-filter");
    const want = ['<option value="">all orgs</option>'].concat((S.orgs || []).map((o) => `<option value="${o.id}">${esc(o.name)}</option>`)).join("");
    if (sel.dataset.sig !== want) { sel.innerHTML = want; sel.dataset.sig = want; }
    sel.value = view.org == null ? "" : String(view.org);
  }

  function renderRunning() {
    const orgs = orgById();
    const rows = S.running || [];
    $("running-count").textContent = rows.length ? `${rows.length}` : "none";
    syncRows($("running-body"), rows, (r) => "r" + r.id, (r) => {
      const started = S.now - (r.elapsed_s || 0);
      const url = `${init.temporal_ui}/namespaces/${encodeURIComponent(init.temporal_namespace)}/workflows/${encodeURIComponent(r.workflow_id || "chart-" + r.id)}`;
      return `<td class="mono"><a href="${esc(url)}" target="_blank" rel="noopener" title="open chart-${r.id} in the Temporal web UI">#${r.id} ${esc(r.external_id || "")} ↗</a></td>
        <td>${esc((orgs.get(r.org) || {}).name || r.org)}</td>
        <td>${esc(r.workflow)}</td><td class="num">${r.cost}</td>
        <td><span class="progress" data-started="${started}" data-expected="${r.expected_s}"><span></span></span> <span class="elapsed muted"></span></td>
        <td data-eta="${r.expected_s == null ? at(r.finish_s) : started + r.expected_s}" data-overdue></td>
        <td>${r.cancel_requested ? '<span class="badge">cancelling</span>' : btn("cancel", "Cancel", "c" + r.id)}</td>`;
    }, (tr, r) => { tr.dataset.chartId = r.id; });
  }

  function renderOrder() {
    const orgs = orgById();
    $("order-waiting").hidden = O.known !== false;
    const total = O.total || 0;
    $("order-range").textContent = O.known === false ? "order unknown: waiting for the scheduler"
      : total ? `${fmt(O.offset + 1)}–${fmt(Math.min(total, O.offset + (O.rows || []).length))} of ${fmt(total)}` : "empty";
    $("order-prev").disabled = O.offset <= 0;
    $("order-next").disabled = !(O.offset + O.limit < total);
    const pages = Math.max(1, Math.ceil(total / O.limit));
    $("order-pages").textContent = `page ${Math.floor(O.offset / O.limit) + 1} of ${pages}`;
    syncRows($("order-body"), O.rows || [], (r) => "c" + r.id, (r) => {
      const key = "c" + r.id;
      const st = r.state || "ordered";
      const actions = st === "cancelled" || st === "running" ? "" : [
        st === "paused" ? btn("resume", "Resume") : btn("pause", "Pause"),
        r.priority ? btn("unprioritize", "Unprioritize") : btn("prioritize", "Prioritize"),
        btn("reorder", "To front"), btn("cancel", "Cancel", key)].join(" ");
      const finish = r.pos == null ? null : at(r.finish_s);
      return `<td class="num">${r.pos == null ? "—" : fmt(r.pos + 1)}</td>
        <td class="mono"><a href="${chartUrl(r.id)}" title="open its page: timeline, prediction, actions">${esc(r.external_id || "—")} <span class="muted">#${r.id}</span></a></td>
        <td>${esc((orgs.get(r.org) || {}).name || r.org)}</td><td>${esc(r.workflow)}</td><td class="num">${r.cost == null ? "—" : r.cost}</td>
        <td><span class="badge ${esc(st)}" data-state="${esc(st)}">${esc(STATE_LABEL[st] || st)}</span>${r.priority ? ' <span class="badge prio">priority</span>' : ""}</td>
        <td>${r.pos == null ? "—" : F.clock(at(r.start_s))}</td>
        <td>${finish == null ? "—" : F.clock(finish)}</td><td class="muted" data-eta="${finish == null ? "" : finish}"></td>
        <td>${actions}</td>`;
    }, (tr, r) => { tr.dataset.chartId = r.id; tr.dataset.state = r.state || "ordered"; tr.className = r.state === "paused" ? "paused" : ""; });
  }

  function renderCosts() {
    const wfs = C.workflows || [];
    const cost = new Map();
    (C.costs || []).forEach((c) => cost.set(c.org + ":" + c.workflow, c.cost));
    const head = "<th>org</th>" + wfs.map((w) => `<th class="num">${esc(w.name)}</th>`).join("");
    if ($("costs-head").dataset.sig !== head) { $("costs-head").innerHTML = head; $("costs-head").dataset.sig = head; }
    const orgs = (S.orgs || []).slice().sort((a, b) => a.name.localeCompare(b.name));
    syncRows($("costs-body"), orgs, (o) => "k" + o.id, (o) => `<td>${esc(o.name)}</td>` + wfs.map((w) => {
      const v = cost.get(o.id + ":" + w.id);
      return can.has("set_cost")
        ? `<td class="num"><input class="small" type="number" min="1" step="1" data-field="cost" data-workflow="${w.id}" value="${v == null ? 1 : v}" title="${v == null ? "no row: costs 1" : ""}" aria-label="cost of ${esc(w.name)} for ${esc(o.name)}"></td>`
        : `<td class="num">${v == null ? '<span class="muted">1</span>' : v}</td>`;
    }).join(""), (tr, o) => { tr.dataset.orgId = o.id; });
  }

  let A = init.activity || [];   // the audit trail's latest entries, newest first
  function renderActivity() {
    syncRows($("activity-body"), A, (e) => "a" + e.id, (e) => `<td class="mono">${F.clock(e.at)}</td>
      <td>${esc(e.by)}</td>
      <td>${e.chart_id ? `<a href="${chartUrl(e.chart_id)}">${esc(e.summary)}</a>` : esc(e.summary)}</td>`);
  }

  let renderQueued = false;
  function renderNow() {
    renderSummary(); renderOrgs(); renderRunning(); renderOrder(); renderCosts(); renderActivity();
    document.dispatchEvent(new CustomEvent("fairsched:state", {detail: {state: S, can, control}}));  // due.js, pools.js
    F.tick();
  }
  function render() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => { renderQueued = false; renderNow(); });
  }

  // ---------------------------------------------------------------- events and patches
  // One live update (its kinds and fields: common/live_updates.py); other kinds change nothing here.
  function applyEvent(ev) {
    if (ev.kind === "audit" && ev.entry) {
      if (!A.some((e) => e.id === ev.entry.id)) A = [ev.entry].concat(A).slice(0, 50);
    } else if (ev.kind === "chart" && ev.chart) {
      const c = ev.chart;
      (O.rows || []).forEach((r) => {
        if (r.id !== c.id) return;
        r.priority = c.priority;
        if (c.state !== "queued") r.state = c.state === "running" ? "running" : "cancelled";
        else if (c.paused) r.state = "paused";
        else if (r.state === "paused") r.state = "ordered";
      });
      (S.running || []).forEach((r) => { if (r.id === c.id && c.cancel_requested) r.cancel_requested = true; });
    } else if ((ev.kind === "paused" || ev.kind === "resumed" || ev.kind === "removed") && typeof ev.chart === "number") {
      (O.rows || []).forEach((r) => {                         // the scheduler's own events
        if (r.id !== ev.chart) return;
        if (ev.kind === "paused") r.state = "paused";
        else if (ev.kind === "resumed" && r.state === "paused") r.state = "ordered";
        else if (ev.kind === "removed") r.state = "cancelled";
      });
    } else if (ev.kind === "org" && ev.org_row) {
      (S.orgs || []).forEach((o) => {
        if (o.id !== ev.org_row.id) return;
        o.weight = ev.org_row.weight; o.held = ev.org_row.held;
      });
      (O.rows || []).forEach((r) => {
        if (r.org !== ev.org_row.id) return;
        if (ev.org_row.held && r.state === "ordered") r.state = "held";
        if (!ev.org_row.held && r.state === "held") r.state = "ordered";
      });
    } else if (ev.kind === "cost") {
      // the control's echo names the workflow by id, the scheduler's event by name: one key
      const wf = typeof ev.workflow === "string"
        ? ((C.workflows || []).find((w) => w.name === ev.workflow) || {}).id : ev.workflow;
      if (wf != null) {
        C.costs = (C.costs || []).filter((c) => !(c.org === ev.org && c.workflow === wf));
        C.costs.push({org: ev.org, workflow: wf, cost: ev.cost});
      }
    } else if (ev.kind === "budget" && ev.budget != null) {
      S.budget = ev.budget;                                   // ours (an echo) or the scheduler's
      poolCapacity("default", ev.budget);                     // with pools the budget is the pool default
    } else if (ev.kind === "pool" && ev.pool != null) {       // a pool's dial (pools.js renders the panel)
      poolCapacity(ev.pool, ev.capacity);
    } else if (ev.kind === "weight" && ev.org != null) {      // the scheduler applied a weight
      (S.orgs || []).forEach((o) => { if (o.id === ev.org) { o.weight = ev.weight; o.held = ev.held; } });
    }
  }

  function poolCapacity(name, capacity) {
    ((S.pool_panel || {}).pools || []).forEach((p) => { if (p.name === name) p.capacity = capacity; });
  }

  function onEvents(msg) {
    (msg.events || []).forEach((ev) => {
      applyEvent(ev);
      if (ev.at) patches.push(ev);
    });
    const c = msg.counters || {};
    ["queued", "ordered", "running", "held", "paused", "blocked"].forEach((k) => {
      if (c[k] != null) S.counters = Object.assign({}, S.counters, {[k]: c[k]});
    });
    if (c.used != null) S.used = c.used;
    if (c.budget != null) S.budget = c.budget;
    if (c.orgs) (S.orgs || []).forEach((o) => {
      const x = c.orgs[String(o.id)];
      if (x) { o.queued = x.queued; o.running = x.running; if (x.used_cost != null) o.used_cost = x.used_cost; }
    });
    render();
  }

  function onSnapshot(msg) {
    S = msg.state; O = msg.order || O; if (msg.costs) C = msg.costs;
    const cutoff = F.serverNow() - 60;
    patches = patches.filter((p) => p.at > cutoff);
    patches.forEach((p) => { if (S.now == null || p.at > S.now) applyEvent(p); });
    appendDepth(S);
    render();
  }

  function loadActivity() {
    fetch(init.activity_url, {credentials: "same-origin"}).then((r) => r.json())
      .then((d) => { A = d.entries || []; render(); }).catch(() => {});
  }

  let connections = 0;
  function onMessage(msg) {
    // A new socket (a reconnect) missed the entries broadcast while it was away.
    if (msg.type === "snapshot" && msg.n === 1 && ++connections > 1) loadActivity();
    if (msg.type === "snapshot") onSnapshot(msg);
    else if (msg.type === "events") onEvents(msg);
    else if (msg.type === "order") { O = msg.order; patches.forEach((p) => { if (S.now == null || p.at > S.now) applyEvent(p); }); render(); }
    else if (msg.type === "control.result") onResult(msg);
  }

  // ---------------------------------------------------------------- controls
  function csrf() {
    const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : (document.querySelector("[name=csrfmiddlewaretoken]") || {}).value;
  }

  const NO_ANSWER_MS = 8000;
  function control(msg, input) {
    const req = ++reqSeq;
    // A socket can drop between send and answer: say so rather than leave the operator guessing.
    const timer = setTimeout(() => {
      if (!pending.delete(req)) return;
      F.toast("No answer from the server about that action (the connection dropped?): check the row before trying again.", "error");
    }, NO_ANSWER_MS);
    pending.set(req, {input: input || null, timer});
    if (live.send({type: "control", req, ...msg})) return;
    fetch(init.control_url, {method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-CSRFToken": csrf()}, body: JSON.stringify(msg)})
      .then((r) => r.json()).then((res) => onResult({...res, req}))
      .catch((e) => onResult({req, ok: false, message: "Request failed: " + e}));
  }

  function onResult(res) {
    const p = pending.get(res.req);
    if (!p) return;                          // answered already, or given up on
    pending.delete(res.req);
    clearTimeout(p.timer);
    const input = p.input;
    if (!res.ok) {
      F.toast(res.message || "Refused.", "error");
      const box = $("last-error");
      box.textContent = res.message || "Refused."; box.hidden = false;
      clearTimeout(box._t); box._t = setTimeout(() => { box.hidden = true; }, 10000);
      return;
    }
    if (res.event) { applyEvent(res.event); patches.push({...res.event, at: F.serverNow()}); }
    if (input) delete input.dataset.dirty;   // sent: live updates may show the new value
    F.toast(res.message || "Done.");
    render();
  }

  /* An input the operator typed into keeps their text (data-dirty) until it is sent, or until
   * they put the shown value back (Escape, or retyping it). */
  document.addEventListener("input", (ev) => {
    const el = ev.target;
    if (!el.matches("input[data-field], #budget-input")) return;
    if (el.value === el.defaultValue) delete el.dataset.dirty; else el.dataset.dirty = "1";
  });

  /* "Confirm cancel" is armed for CONFIRM_MS; when that runs out the button visibly turns back
   * into "Cancel", so a click on a label that says "Confirm cancel" always cancels. */
  const CONFIRM_MS = 4000;
  function disarm() {
    confirmKey = null; clearTimeout(confirmTimer);
    pressed = null;
    renderNow();
  }

  document.addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-action]");
    if (!b) return;
    const action = b.dataset.action;
    const chartRow = b.closest("[data-chart-id]"), orgRow = b.closest("[data-org-id]");
    if (chartRow) {
      const id = +chartRow.dataset.chartId, key = "c" + id;
      if (action === "cancel" && confirmKey !== key) {
        disarm();
        confirmKey = key;
        confirmTimer = setTimeout(disarm, CONFIRM_MS);
        renderNow();                   // the row now says "Confirm cancel" (the focus follows)
        return;
      }
      if (action === "cancel") { confirmKey = null; clearTimeout(confirmTimer); }
      control({action, chart: id});
    } else if (orgRow) {
      const id = +orgRow.dataset.orgId;
      if (action === "set_weight") {
        const inp = orgRow.querySelector("input[data-field=weight]");
        if (!inp.dataset.dirty) {        // never send a value the operator did not type
          F.toast(`Type a new weight for ${orgRow.dataset.orgName || "this org"} first (it is ${inp.defaultValue}).`, "error");
          inp.focus();
          return;
        }
        control({action, org: id, weight: inp.value}, inp);
      } else control({action, org: id});
    }
  });

  document.addEventListener("change", (ev) => {
    const inp = ev.target;
    if (!inp.matches("input[data-field=cost]") || !inp.dataset.dirty) return;
    const row = inp.closest("[data-org-id]");
    control({action: "set_cost", org: +row.dataset.orgId, workflow: +inp.dataset.workflow, cost: inp.value}, inp);
  });
  document.addEventListener("keydown", (ev) => {
    const el = ev.target;
    if (ev.key === "Escape" && el.matches("input[data-field], #budget-input")) {
      el.value = el.defaultValue; delete el.dataset.dirty; render();
    } else if (ev.key === "Enter" && el.matches("input[data-field=weight]")) {
      ev.preventDefault();
      const b = el.closest("tr").querySelector("button[data-action=set_weight]");
      if (b) b.click();
    }
  });

  $("policies-form").addEventListener("input", () => { $("policies-form").dataset.dirty = "1"; });
  $("policies-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const form = $("policies-form");
    delete form.dataset.dirty;
    control({action: "set_policies", share: $("share-select").value, quantum_s: $("quantum-input").value,
             dispatch: $("dispatch-select").value}, $("quantum-input"));
  });

  $("budget-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const inp = $("budget-input");
    if (!inp.dataset.dirty) { F.toast(`Type a new budget first (it is ${inp.defaultValue}).`, "error"); inp.focus(); return; }
    control({action: "set_budget", budget: inp.value}, inp);
  });

  // ---------------------------------------------------------------- the order's paging and filter
  function requestPage() {
    if (live.send({type: "view", ...view})) return;
    const q = new URLSearchParams({offset: view.offset, limit: view.limit});
    if (view.org != null) q.set("org", view.org);
    if (view.state) q.set("state", view.state);
    fetch(init.order_url + "?" + q, {credentials: "same-origin"}).then((r) => r.json()).then((page) => { O = page; render(); });
  }
  $("order-prev").addEventListener("click", () => { view.offset = Math.max(0, view.offset - view.limit); requestPage(); });
  $("order-next").addEventListener("click", () => { view.offset += view.limit; requestPage(); });
  $("org-filter").addEventListener("change", (ev) => { view.org = ev.target.value ? +ev.target.value : null; view.offset = 0; requestPage(); });
  $("state-filter").addEventListener("change", (ev) => { view.state = ev.target.value || null; view.offset = 0; requestPage(); });
  $("order-jump").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const pos = Math.max(1, parseInt($("order-jump-pos").value || "1", 10));
    view.offset = Math.floor((pos - 1) / view.limit) * view.limit; requestPage();
  });

  // ---------------------------------------------------------------- plots (Chart.js, shipped in static/)
  const PALETTE = ["#2f6fed", "#1f9d55", "#c98a04", "#c0262d", "#7a4fd6", "#0e9aa7", "#d9480f", "#5c7080", "#e64980", "#2b8a3e"];
  let depth = [];       // [{t, q: {orgId: n}}]
  let plotMeta = {orgs: {}};
  const plots = {};
  const timeTick = (v) => F.clock(v);
  const baseOpts = {animation: false, responsive: true, maintainAspectRatio: false,
    plugins: {legend: {labels: {boxWidth: 10, font: {size: 11}}}}, elements: {point: {radius: 0}}};

  function appendDepth(state) {
    if (state.source !== "scheduler" || state.now == null) return;
    if (depth.length && depth[depth.length - 1].t >= state.now) return;
    const q = {};
    (state.orgs || []).forEach((o) => { q[o.id] = o.queued; });
    depth.push({t: state.now, q});
    if (depth.length > 1200) depth = depth.slice(-1200);
    drawDepth();
  }

  function drawDepth() {
    if (!window.Chart || !plots.depth) return;
    const names = Object.assign({}, plotMeta.orgs);
    (S.orgs || []).forEach((o) => { names[o.id] = o.name; });
    const last = depth.length ? depth[depth.length - 1].q : {};
    const top = Object.keys(last).sort((a, b) => last[b] - last[a]).slice(0, 8);
    const sets = top.map((id, i) => ({label: names[id] || id, borderColor: PALETTE[i], backgroundColor: PALETTE[i],
      borderWidth: 1.5, data: depth.map((p) => ({x: p.t, y: p.q[id] || null}))}));
    if (Object.keys(last).length > top.length) {
      sets.push({label: "others", borderColor: "#adb5bd", borderWidth: 1, borderDash: [4, 3],
        data: depth.map((p) => ({x: p.t, y: Object.keys(p.q).filter((k) => !top.includes(k)).reduce((s, k) => s + p.q[k], 0) || null}))});
    }
    plots.depth.data.datasets = sets;
    plots.depth.update("none");
  }

  function setupPlots() {
    if (!window.Chart) { document.querySelectorAll(".plot").forEach((p) => { p.textContent = "charting library not loaded"; }); return; }
    plots.depth = new Chart($("plot-depth"), {type: "line", data: {datasets: []}, options: {...baseOpts,
      scales: {x: {type: "linear", ticks: {callback: timeTick, maxTicksLimit: 6}}, y: {type: "logarithmic", title: {display: true, text: "queued charts (log scale)"},
        ticks: {callback: (v) => ([1, 10, 100, 1000, 10000, 100000, 1000000].includes(v) ? fmt(v) : null)}}}}});
    plots.rate = new Chart($("plot-rate"), {type: "bar", data: {labels: [], datasets: [
      {label: "started", backgroundColor: "#2f6fed", data: []}, {label: "finished", backgroundColor: "#1f9d55", data: []}]},
      options: {...baseOpts, scales: {x: {ticks: {maxTicksLimit: 8}}, y: {beginAtZero: true, title: {display: true, text: "charts / minute"}}}}});
    plots.eta = new Chart($("plot-eta"), {type: "scatter", data: {datasets: []}, options: {...baseOpts,
      elements: {point: {radius: 3}},
      plugins: {...baseOpts.plugins, tooltip: {callbacks: {label: (c) => c.raw.label || ""}}},
      scales: {x: {title: {display: true, text: "actual run time (min)"}, beginAtZero: true},
               y: {title: {display: true, text: "predicted run time (min)"}, beginAtZero: true}}}});
  }

  function loadPlots() {
    fetch(init.plots_url, {credentials: "same-origin"}).then((r) => r.json()).then((d) => {
      plotMeta = d;
      if (!plots.rate) return;
      const seen = new Set(depth.map((p) => p.t));
      depth = d.depth.filter((p) => !seen.has(p.t)).concat(depth).sort((a, b) => a.t - b.t);
      drawDepth();
      plots.rate.data.labels = d.per_minute.t.map((t) => F.clock(t));
      plots.rate.data.datasets[0].data = d.per_minute.starts;
      plots.rate.data.datasets[1].data = d.per_minute.finishes;
      plots.rate.update("none");
      const pts = d.finishes.map((f) => ({x: (f.finished_at - f.started_at) / 60, y: (f.predicted_at - f.started_at) / 60,
        label: `#${f.id} ${f.external_id || ""}: actual ${F.duration(f.finished_at - f.started_at)}, predicted ${F.duration(f.predicted_at - f.started_at)}`}));
      const max = pts.reduce((m, p) => Math.max(m, p.x, p.y), 1);
      plots.eta.data.datasets = [
        {label: "finished charts", data: pts, backgroundColor: "rgba(47,111,237,.6)"},
        {label: "exact", type: "line", data: [{x: 0, y: 0}, {x: max, y: max}], borderColor: "#adb5bd", borderDash: [4, 3], borderWidth: 1, pointRadius: 0}];
      plots.eta.update("none");
      $("eta-note").textContent = pts.length ? `${pts.length} recent finishes; on the dashed line the prediction was exact.` : "no finished charts yet.";
    }).catch(() => {});
  }

  // ---------------------------------------------------------------- start
  const live = F.connect(init.ws_path, {onMessage});
  setupPlots();
  appendDepth(S);
  render();
  loadPlots();
  setInterval(loadPlots, 30000);
  window.fairDashboard = {state: () => S, order: () => O};
})();
