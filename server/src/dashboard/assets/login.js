// BeeBot grid dashboard: the login. The admin token is posted once, in a
// body (never in a URL); the session token that comes back is kept in this
// origin's localStorage (scheme, host and port: no other loopback port's
// page can read it) and sent as "Authorization: Session ..." with every
// call. Never a cookie: a browser would send it to every port of 127.0.0.1.
"use strict";

const KEY = "beebot-admin-session";

function say(text) {
  const note = document.getElementById("note");
  note.textContent = text;
  note.hidden = false;
}

document.getElementById("login").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const token = ev.target.elements.token.value;
  let r;
  try {
    r = await fetch("/login", {
      method: "POST",
      cache: "no-store",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: token }),
    });
  } catch (e) {
    say("The server does not answer: " + e.message);
    return;
  }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    say(body.error || ("Refused: " + r.status));
    ev.target.elements.token.value = "";
    return;
  }
  localStorage.setItem(KEY, body.session);
  window.location.assign("/");
});
