/* Fairsched live socket: numbered messages (``n``), a refetch of the snapshot on a gap,
 * auto-reconnect, a visible live indicator, and time formatting shared by the pages.
 * The protocol (event kinds, ``n``, refetch) is common/live_updates.py; docs/live-updates.md.
 *
 *   const live = FairLive.connect("/ws/dashboard/", {onMessage, onStatus});
 *   live.send({type: "view", offset: 100});
 */
(function () {
  "use strict";

  const F = {};
  F.skew = 0; // server clock minus ours, seconds

  F.serverNow = () => Date.now() / 1000 + F.skew;

  F.esc = (v) => String(v == null ? "" : v).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));

  F.duration = (s) => {
    if (s == null || !isFinite(s)) return "—";
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + " s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + " min" + (m < 10 && s % 60 ? " " + (s % 60) + " s" : "");
    const h = Math.floor(m / 60);
    if (h < 48) return h + " h" + (m % 60 ? " " + (m % 60) + " min" : "");
    return Math.floor(h / 24) + " d " + (h % 24) + " h";
  };
  /* "in 3 min"; once past, "now", or for a running chart's expected finish (``overdue``)
   * how long ago it should have finished: "overdue by 4 min". */
  F.inText = (epoch, overdue) => {
    if (epoch == null || !isFinite(epoch)) return "—";
    const left = epoch - F.serverNow();
    if (overdue && left < -0.5) return "overdue by " + F.duration(-left);
    return left <= 0.5 ? "now" : "in " + F.duration(left);
  };
  /* One time format everywhere (the admin's lists use the same): 24 h "14:05", and
   * "Nov 30 14:05" when it is not today. */
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  const two = (n) => String(n).padStart(2, "0");
  F.clock = (epoch) => {
    if (epoch == null || !isFinite(epoch)) return "—";
    const d = new Date(epoch * 1000);
    const hm = two(d.getHours()) + ":" + two(d.getMinutes());
    if (d.toDateString() === new Date().toDateString()) return hm;
    return MONTHS[d.getMonth()] + " " + d.getDate() + " " + hm;
  };
  F.parseIso = (iso) => (iso ? Date.parse(iso) / 1000 : null);
  // The "stale" badge: the scheduler's last snapshot is too old to show as live.
  F.showStale = (el, st) => {
    if (!el) return;
    el.hidden = !st.stale;
    if (st.stale) el.textContent = `Stale: the scheduler's last snapshot is ${F.duration(st.age_s || 0)} old; it looks stopped. Counts come from the database, positions and ETAs are not shown.`;
  };

  /* Every element with data-eta="<epoch s>" shows "in 3 min"; with data-overdue too (a
   * running chart's expected finish), "overdue by 4 min" once that time has passed. */
  F.tick = () => {
    document.querySelectorAll("[data-eta]").forEach((el) => {
      const v = el.getAttribute("data-eta");
      const overdue = el.hasAttribute("data-overdue");
      el.textContent = v === "" ? "—" : F.inText(parseFloat(v), overdue);
      if (overdue) el.classList.toggle("overdue", v !== "" && parseFloat(v) < F.serverNow() - 0.5);
    });
    document.querySelectorAll("[data-started][data-expected]").forEach((el) => {
      const started = parseFloat(el.dataset.started), expected = parseFloat(el.dataset.expected);
      const elapsed = Math.max(0, F.serverNow() - started);
      const frac = expected > 0 ? elapsed / expected : 1;
      const bar = el.querySelector("span");
      if (bar) bar.style.width = Math.min(100, frac * 100).toFixed(1) + "%";
      el.classList.toggle("over", frac > 1);
      el.title = F.duration(elapsed) + " of ~" + F.duration(expected);
      const label = el.parentElement && el.parentElement.querySelector(".elapsed");
      if (label) label.textContent = F.duration(elapsed) + " / " + F.duration(expected);
    });
  };
  setInterval(F.tick, 1000);

  F.toast = (text, kind) => {
    let box = document.getElementById("toasts");
    if (!box) { box = document.createElement("div"); box.id = "toasts"; document.body.appendChild(box); }
    const el = document.createElement("div");
    el.className = "toast " + (kind || "");
    el.setAttribute("role", kind === "error" ? "alert" : "status");
    el.textContent = text;
    box.appendChild(el);
    setTimeout(() => el.remove(), kind === "error" ? 8000 : 3000);
  };

  F.setLive = (state, text) => {
    document.querySelectorAll("[data-live]").forEach((el) => {
      el.dataset.state = state;
      el.textContent = text;
    });
  };

  F.connect = (path, handlers) => {
    const proto = location.protocol === "https:" ? "wss://" : "ws://";
    const url = proto + location.host + path;
    let ws = null, lastN = 0, backoff = 500, closedByUs = false, refused = 0;
    const api = {
      send(msg) {
        if (ws && ws.readyState === WebSocket.OPEN) { ws.send(JSON.stringify(msg)); return true; }
        return false;
      },
      get open() { return !!ws && ws.readyState === WebSocket.OPEN; },
      close() { closedByUs = true; if (ws) ws.close(); },
    };
    function open() {
      F.setLive("connecting", lastN ? "Reconnecting…" : "Connecting…");
      ws = new WebSocket(url);
      lastN = 0;
      let opened = false;
      ws.onopen = () => { opened = true; backoff = 500; refused = 0; F.setLive("live", "Live"); };
      ws.onmessage = (ev) => {
        let msg;
        try { msg = JSON.parse(ev.data); } catch (e) { return; }
        if (msg.server_time) F.skew = msg.server_time - Date.now() / 1000;
        if (typeof msg.n === "number") {
          // A message went missing: refetch the snapshot (live_updates.refetch_needed, the same rule).
          if (lastN && msg.n !== lastN + 1 && msg.type !== "snapshot") {
            lastN = msg.n;
            api.send({type: "refetch", after: msg.n});
            return;
          }
          lastN = msg.n;
        }
        if (handlers.onMessage) handlers.onMessage(msg);
        F.tick();
      };
      ws.onclose = (ev) => {
        if (closedByUs) return;
        if (!opened) refused += 1;
        const wait = Math.min(backoff, 10000);
        backoff = Math.min(backoff * 2, 10000);
        const why = ev.code === 4403 || refused > 2 ? "Offline (not allowed or server down)" : "Reconnecting…";
        F.setLive(opened || refused < 3 ? "connecting" : "offline", why);
        setTimeout(open, wait);
      };
    }
    open();
    return api;
  };

  window.FairLive = F;
})();
