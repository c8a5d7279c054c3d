/* Swagger UI on /api/v1/docs (templates/ninja/swagger.html), loaded before django-ninja's
 * swagger-ui-init.js. Static, no inline script (CSP).
 * - Deep links off: each operation's path was a link inside the operation's button, a control
 *   inside a control (axe: nested-interactive). Set here, in the settings the init script reads,
 *   whatever api/views.py gives Swagger.
 * - Its section headings (the tags' h3, "Schemas" an h4) follow its h1: level 2 for assistive
 *   technology (axe: heading-order), set as Swagger UI renders them (it renders after this runs,
 *   and again as sections open). */
(function () {
  "use strict";
  const settings = document.getElementById("swagger-settings");
  if (settings) {
    const config = JSON.parse(settings.textContent);
    config.deepLinking = false;
    settings.textContent = JSON.stringify(config);
  }
  const root = document.getElementById("swagger-ui");
  if (!root) return;
  const level = () => root.querySelectorAll("h3.opblock-tag:not([aria-level]), section.models > h4:not([aria-level])")
    .forEach((h) => h.setAttribute("aria-level", "2"));
  new MutationObserver(level).observe(root, {childList: true, subtree: true});
  level();
})();
