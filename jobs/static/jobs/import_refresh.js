/* An import's change page while it runs: reloaded every 2 s to show its progress, unless the
 * operator unticks "Refresh this page" (WCAG 2.2.1: a page that refreshes itself lets the user
 * stop it; a <meta http-equiv="refresh"> did not). The choice lasts the browser tab's session.
 * Static, no inline script (CSP). */
(function () {
  "use strict";
  const box = document.getElementById("import-refresh");
  if (!box) return;
  const KEY = "fairsched.importRefresh";
  if (sessionStorage.getItem(KEY) === "off") box.checked = false;
  let timer = null;
  const arm = () => {
    clearTimeout(timer);
    if (box.checked) timer = setTimeout(() => location.reload(), 2000);
  };
  box.addEventListener("change", () => { sessionStorage.setItem(KEY, box.checked ? "on" : "off"); arm(); });
  arm();
})();
