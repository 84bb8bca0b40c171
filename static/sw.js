// Pizza Bot's service worker (docs/notifications.md), served at /sw.js so
// its scope is the whole app. It keeps the static files and one offline
// page, and nothing else: pages of data always come from the server, and
// when the server cannot be reached the offline page says so rather than
// showing an old inbox as if it were current. It also shows Web Push
// notifications and opens the thread a click asks for.
"use strict";

// The server fills these in: the content-hashed URLs of the static files
// and a version that changes with them, so a deploy installs a new worker.
const VERSION = "__VERSION__";
const ASSETS = __ASSETS__;
const OFFLINE = "/offline";
const CACHE = "pizza-" + VERSION;

self.addEventListener("install", (e) => {
  e.waitUntil(
    caches
      .open(CACHE)
      .then((c) => c.addAll([OFFLINE, ...ASSETS]))
      .then(() => self.skipWaiting()),
  );
});

self.addEventListener("activate", (e) => {
  e.waitUntil(
    caches
      .keys()
      .then((keys) => Promise.all(keys.filter((k) => k.startsWith("pizza-") && k !== CACHE).map((k) => caches.delete(k))))
      .then(() => self.clients.claim()),
  );
});

self.addEventListener("fetch", (e) => {
  const req = e.request;
  if (req.method !== "GET") return;
  const url = new URL(req.url);
  if (url.origin !== self.location.origin) return;
  if (url.pathname.startsWith("/static/")) {
    // Static files carry their hash in the URL: the cached copy is the
    // right one.
    e.respondWith(caches.match(req).then((hit) => hit || fetch(req)));
    return;
  }
  if (req.mode === "navigate") {
    // A page: always the network; the offline page only when it fails.
    e.respondWith(fetch(req).catch(() => caches.match(OFFLINE)));
  }
});

self.addEventListener("push", (e) => {
  let p = {};
  try {
    p = e.data ? e.data.json() : {};
  } catch (_) {
    p = {};
  }
  const title = p.title || "Pizza Bot";
  const body = [p.thread, p.body].filter(Boolean).join("\n");
  const url = typeof p.url === "string" && p.url.startsWith("/") && !p.url.startsWith("//") ? p.url : "/";
  e.waitUntil(
    self.registration.showNotification(title, {
      body: body,
      tag: p.tag || undefined,
      renotify: Boolean(p.tag),
      icon: ASSETS.find((a) => a.endsWith("/icons/icon-192.png")),
      data: { url: url },
    }),
  );
});

// openThread focuses a window of the app already showing url, or navigates
// one of its windows there, or opens a new one.
function openThread(url) {
  const target = new URL(url, self.location.origin).href;
  return self.clients.matchAll({ type: "window", includeUncontrolled: true }).then((wins) => {
    for (const w of wins) {
      if (w.url === target && "focus" in w) return w.focus();
    }
    for (const w of wins) {
      if ("navigate" in w) return w.navigate(target).then((c) => (c ? c.focus() : self.clients.openWindow(target)));
    }
    return self.clients.openWindow(target);
  });
}

self.addEventListener("notificationclick", (e) => {
  e.notification.close();
  const url = (e.notification.data && e.notification.data.url) || "/";
  e.waitUntil(openThread(url));
});
