/* The Pools panel (docs/operating.md, "The Pools panel"): shown while the scheduler's snapshot
 * has capacity pools. A dial per pool in place of the one budget dial: capacity, units in use,
 * and in words the chart at its head ("waiting for pool llm: 8 of 8 in use — chart #123 of Acme
 * at the head"); each org's use against its ceiling ("Acme: llm 4 of 4 (ceiling)"). The words are
 * the server's (dashboard/selectors.py pool_panel, common/clear_notes.py). A pool's dial sets its
 * capacity through the set_pool control (control.services.pool_set, audited); the pool default's
 * dial is the budget's own (#budget-dial, moved here), which sets the budget. It renders each
 * time the dashboard does (dashboard.js sends "fairsched:state"), so it is as live as the rest. */
(function () {
  "use strict";
  const F = window.FairLive;
  const esc = F.esc;
  const $ = (id) => document.getElementById(id);
  const fmt = (n) => (n == null ? "—" : Number(n).toLocaleString());
  const BUDGET = "default";
  let control = null;

  /* The budget's dial lives in the Budget card; with pools it is the pool default's dial. */
  function placeBudgetDial(slot) {
    const dial = $("budget-dial");
    const home = $("budget-moved");
    if (slot) { if (dial.parentNode !== slot) slot.appendChild(dial); }
    else if (dial.previousElementSibling !== home) home.after(dial);
    home.hidden = !slot;
  }

  function arc(frac, over) {
    const len = 251.3;  // the half circle's length (r 80)
    const colour = over ? "#c0262d" : frac > 0.85 ? "#c98a04" : "#2f6fed";
    return `<svg viewBox="0 0 200 115" aria-hidden="true" focusable="false">
      <path d="M 20 105 A 80 80 0 0 1 180 105" fill="none" stroke="#eef0f3" stroke-width="18" stroke-linecap="round"/>
      <path d="M 20 105 A 80 80 0 0 1 180 105" fill="none" stroke="${colour}" stroke-width="18" stroke-linecap="round" stroke-dasharray="${len * frac} ${len}"/></svg>`;
  }

  /* One pool's card, made once and then updated in place (a typed capacity is kept). */
  function card(p, can) {
    let el = document.querySelector(`[data-pool-card="${CSS.escape(p.name)}"]`);
    if (!el) {
      el = document.createElement("div");
      el.className = "pool-dial";
      el.dataset.poolCard = p.name;
      el.setAttribute("role", "group");
      el.setAttribute("aria-labelledby", `pool-h-${p.name}`);
      const form = p.budget || !can.has("set_pool") ? "" : `
        <form class="pool-form" data-pool="${esc(p.name)}">
          <label class="muted plain" for="pool-capacity-${esc(p.name)}">capacity of pool ${esc(p.name)}</label>
          <input id="pool-capacity-${esc(p.name)}" class="small" type="number" name="capacity" min="0" step="1" data-pool-input="${esc(p.name)}">
          <button type="submit" data-control="set_pool">Set capacity</button>
        </form>`;
      el.innerHTML = `<h3 id="pool-h-${esc(p.name)}">${p.budget ? "default (the budget)" : esc(p.name)}</h3>
        <div class="pool-arc" data-pool-arc></div>
        <div class="big" data-pool-use></div><div class="muted">units in use / capacity</div>
        <div data-budget-slot></div>${form}
        <p class="pool-text" data-pool-text></p>`;
    }
    const over = p.in_use > p.capacity;
    const frac = p.capacity ? Math.min(1, p.in_use / p.capacity) : (p.in_use ? 1 : 0);
    const sig = `${p.in_use}/${p.capacity}`;
    if (el.dataset.sig !== sig) {
      el.dataset.sig = sig;
      el.querySelector("[data-pool-arc]").innerHTML = p.budget ? "" : arc(frac, over);
      el.querySelector("[data-pool-use]").textContent = p.budget ? "" : `${fmt(p.in_use)} / ${fmt(p.capacity)}`;
    }
    el.querySelector("[data-pool-use]").hidden = !!p.budget;
    el.querySelector("[data-pool-use]").nextElementSibling.hidden = !!p.budget;
    const text = el.querySelector("[data-pool-text]");
    if (text.textContent !== p.text) text.textContent = p.text;
    text.classList.toggle("waiting", p.blocked_by != null);
    const inp = el.querySelector("[data-pool-input]");
    if (inp && !inp.dataset.dirty) { inp.value = p.capacity; inp.defaultValue = String(p.capacity); }
    return el;
  }

  function render(S, can) {
    const panel = S.source === "scheduler" ? S.pool_panel : null;
    $("pools-panel").hidden = !panel;
    if (!panel) { placeBudgetDial(null); return; }
    const box = $("pool-dials");
    const keep = new Set();
    let prev = null;
    (panel.pools || []).forEach((p) => {
      const el = card(p, can);
      keep.add(el);
      const want = prev ? prev.nextSibling : box.firstChild;
      if (want !== el) box.insertBefore(el, want);
      prev = el;
      if (p.budget) placeBudgetDial(el.querySelector("[data-budget-slot]"));
    });
    Array.from(box.children).forEach((el) => {
      if (keep.has(el)) return;
      if (el.contains($("budget-dial"))) placeBudgetDial(null);
      el.remove();
    });
    const items = (panel.orgs || []).map((o) => `<li data-org-id="${o.id}"${o.at_ceiling ? ' class="at-ceiling"' : ""}>${esc(o.text)}` +
      (o.waiting ? ` <span class="muted">— ${esc(o.waiting)}</span>` : "") + "</li>").join("")
      || '<li class="muted">No org holds units or has a limit in a pool.</li>';
    const list = $("pool-orgs");
    if (list.dataset.sig !== items) { list.innerHTML = items; list.dataset.sig = items; }
  }

  document.addEventListener("fairsched:state", (ev) => {
    control = ev.detail.control;
    render(ev.detail.state, ev.detail.can);
  });

  /* A typed capacity is the operator's until sent (or put back with Escape). */
  document.addEventListener("input", (ev) => {
    const el = ev.target;
    if (!el.matches("[data-pool-input]")) return;
    if (el.value === el.defaultValue) delete el.dataset.dirty; else el.dataset.dirty = "1";
  });
  document.addEventListener("keydown", (ev) => {
    const el = ev.target;
    if (ev.key === "Escape" && el.matches("[data-pool-input]")) { el.value = el.defaultValue; delete el.dataset.dirty; }
  });
  document.addEventListener("submit", (ev) => {
    const form = ev.target.closest("form.pool-form");
    if (!form) return;
    ev.preventDefault();
    const inp = form.querySelector("[data-pool-input]");
    const pool = form.dataset.pool;
    if (!inp.dataset.dirty) { F.toast(`Type a new capacity for pool ${pool} first (it is ${inp.defaultValue}).`, "error"); inp.focus(); return; }
    if (control) control({action: "set_pool", pool, capacity: inp.value}, inp);
  });
})();
