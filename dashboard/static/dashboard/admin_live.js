/* Live counters in the admin header, from the dashboard socket. */
(function () {
  "use strict";
  const F = window.FairLive;
  let S = null;
  const set = (k, v) => document.querySelectorAll(`[data-admin-counter="${k}"]`).forEach((el) => { el.textContent = v == null ? "—" : Number.isFinite(v) ? Number(v).toLocaleString() : v; });
  function render() {
    if (!S) return;
    const c = S.counters || {};
    set("used", S.used); set("budget", S.budget);
    ["queued", "running", "held", "paused", "blocked"].forEach((k) => set(k, c[k]));
    const clear = S.clear_at ? F.parseIso(S.clear_at) : (S.clear_s != null ? S.now + S.clear_s : null);
    const note = S.no_eta ? ` · ${S.no_eta}` : "";  // held, paused, blocked: never "clear"
    set("clear", S.source !== "scheduler" ? "waiting for the scheduler"
      : S.clear_s === 0 ? (S.no_eta || "clear") : `${F.clock(clear)} (${F.inText(clear)})${note}`);
  }
  F.connect("/ws/dashboard/", {onMessage(msg) {
    if (msg.type === "snapshot") S = msg.state;
    else if (msg.type === "events" && S) {
      const c = msg.counters || {};
      S.counters = Object.assign({}, S.counters, c);
      if (c.used != null) S.used = c.used;
      if (c.budget != null) S.budget = c.budget;
      (msg.events || []).forEach((ev) => { if (ev.kind === "budget" && ev.budget != null) S.budget = ev.budget; });
    }
    render();
  }});
  setInterval(render, 1000);
})();

/* The selection widgets (filter_horizontal: an org's members, a user's groups and permissions):
 * Django's SelectFilter2.js names its search icon with aria-label on a bare span, which has no
 * role to take a name (axe: aria-prohibited-attr); it is an image of a magnifying glass.
 * SelectFilter2 builds them on "load", in a listener added before this one (its script is in
 * the head). */
window.addEventListener("load", () => {
  document.querySelectorAll("span.help-tooltip[aria-label]:not([role])").forEach((el) => el.setAttribute("role", "img"));
});

/* django-rq's job lists: their select-all box has no name, which also left its column's header
 * empty (axe: label, empty-table-header); Django's own lists name it the same way. */
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("#action-toggle:not([aria-label])")
    .forEach((el) => el.setAttribute("aria-label", "Select all jobs on this page for an action"));
});
