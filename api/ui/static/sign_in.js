/* Sign in: check the key against /v1 (GET /v1/files), keep it in this tab's sessionStorage, go on. */
"use strict";
(function () {
  const form = document.getElementById("sign-in-form");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const input = document.getElementById("api-key");
    const value = input.value.trim();
    const r = await fetch("/v1/files?limit=1", { headers: { Authorization: "Bearer " + value } });
    if (!r.ok) {
      LCSB.setText("sign-in-error", r.status === 401 ? "That API key was not accepted." : "Sign-in failed: HTTP " + r.status);
      return;
    }
    sessionStorage.setItem(LCSB.KEY, value);
    input.value = "";
    const next = new URLSearchParams(location.search).get("next") || "";
    location.assign(/^\/ui\/[^/]/.test(next) && !next.startsWith("/ui/sign-in") ? next : "/ui/jobs");
  });
})();
