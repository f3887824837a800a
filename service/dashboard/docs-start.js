// Starts whichever API viewer its page loaded (service/http/api_docs.py): a file, not an inline script, so the pages keep a
// CSP without 'unsafe-inline' for scripts. URLs are relative, so a proxy's path prefix carries over.
"use strict";
(function () {
  const spec = "openapi.json";
  if (window.SwaggerUIBundle) {
    window.ui = SwaggerUIBundle({
      url: spec,
      dom_id: "#swagger-ui",
      presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
      layout: "BaseLayout",
      deepLinking: true,
      showExtensions: true,
      showCommonExtensions: true,
    });
  } else if (window.Redoc) {
    Redoc.init(spec, {}, document.getElementById("redoc"));
  }
})();
