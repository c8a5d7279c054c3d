/* Worker capacity: refreshes the elements marked data-capacity ("full": the dashboard's
 * banner; "short": the admin's live counter) from /dashboard/capacity.json every 15 s
 * (the check itself runs every 15 s from rqcron: fairsched/temporal/capacity.py). */
(function () {
  "use strict";
  var els = Array.prototype.slice.call(document.querySelectorAll("[data-capacity]"));
  if (!els.length) return;
  var url = els[0].getAttribute("data-capacity-url");
  if (!url) return;

  function setClass(el, warn) {
    el.classList.toggle("capacity-warn", warn);
    el.classList.toggle("capacity-note", !warn);
  }

  function show(c) {
    els.forEach(function (el) {
      var warn = !!c.warning;
      setClass(el, warn);
      if (el.getAttribute("data-capacity") === "short") {
        var b = document.createElement("b");
        b.textContent = c.known ? String(c.slots) : "?";
        el.textContent = "worker slots ";
        el.appendChild(b);
        if (c.short) el.appendChild(document.createTextNode(" · " + c.short + " waiting for a slot"));
        el.title = c.warning || c.note || (c.workers + " live workers, " + c.slots + " activity slots, " +
                                            c.running + " running charts");
        return;
      }
      el.textContent = c.warning || (c.known ? "" : c.note || "");
      el.hidden = !warn && !!c.known;
    });
  }

  function poll() {
    fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (c) { if (c) show(c); })
      .catch(function () { /* the next poll tries again */ });
  }

  setInterval(poll, 15000);
})();
