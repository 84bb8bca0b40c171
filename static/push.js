// Web Push on this device (docs/notifications.md): registers the service
// worker on every page, and on the devices page turns push notifications
// on (permission, pushManager.subscribe with the server's VAPID key, the
// subscription POSTed to the API) or off for this browser.
(function () {
  "use strict";
  if (!("serviceWorker" in navigator)) return;
  const ready = navigator.serviceWorker.register("/sw.js", { scope: "/" }).catch(() => null);

  function b64ToBytes(s) {
    const b = atob(s.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((s.length + 3) % 4));
    return Uint8Array.from(b, (c) => c.charCodeAt(0));
  }

  function say(msg) {
    const out = document.querySelector("[data-push-status]");
    if (out) out.textContent = msg;
  }

  async function subscribe(button) {
    if (!("PushManager" in window) || !("Notification" in window)) {
      say("This browser cannot receive push notifications.");
      return;
    }
    const perm = await Notification.requestPermission();
    if (perm !== "granted") {
      say("Notifications are blocked for this site: allow them in the browser's site settings.");
      return;
    }
    const reg = (await ready) && (await navigator.serviceWorker.ready);
    if (!reg) {
      say("The service worker could not be registered.");
      return;
    }
    let sub = await reg.pushManager.getSubscription();
    if (!sub) {
      sub = await reg.pushManager.subscribe({
        userVisibleOnly: true,
        applicationServerKey: b64ToBytes(button.dataset.vapidKey),
      });
    }
    const body = sub.toJSON();
    const res = await fetch("/api/v1/push/subscriptions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      credentials: "same-origin",
      body: JSON.stringify(body),
    });
    if (!res.ok) {
      const err = await res.json().catch(() => ({}));
      say("Not turned on: " + (err.error || res.status));
      return;
    }
    say("Notifications are on for this device.");
    location.reload();
  }

  document.addEventListener("click", (e) => {
    const b = e.target.closest && e.target.closest('[data-action="push-subscribe"]');
    if (!b) return;
    e.preventDefault();
    subscribe(b).catch((err) => say("Not turned on: " + err.message));
  });
})();
