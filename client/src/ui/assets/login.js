// The one-time login link: its code is in the fragment (never sent to a
// server); it is spent for a session token that only this tab keeps
// (sessionStorage is per origin, port included), then the page opens.
"use strict";

(async function () {
  const msg = document.getElementById("login-msg");
  const code = new URLSearchParams(location.hash.slice(1)).get("code") || "";
  history.replaceState(null, "", "/login");
  try {
    const r = await fetch("/api/session", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ code: code }),
    });
    const v = await r.json();
    if (!r.ok) { throw new Error(v.error || ("the client answered " + r.status)); }
    sessionStorage.setItem("beebot-session", v.token);
    location.replace("/");
  } catch (e) {
    msg.textContent = e.message;
  }
})();
