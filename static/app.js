// Pizza Bot's small script, on top of htmx: keyboard shortcuts, bulk
// selection, local times and a few conveniences. Every page works without it.
(function () {
  "use strict";

  document.documentElement.classList.add("js");

  let current = -1; // index of the current row of the listing
  let gPressedAt = 0; // when the "g" of "g i" was pressed

  const rowSelector = '#thread-list [data-testid="thread-row"]';
  const rows = () => Array.from(document.querySelectorAll(rowSelector));

  function setCurrent(i, focus) {
    const rs = rows();
    if (!rs.length) {
      current = -1;
      return;
    }
    current = Math.max(0, Math.min(i, rs.length - 1));
    rs.forEach((r, j) => r.classList.toggle("is-current", j === current));
    if (focus !== false) {
      const link = rs[current].querySelector(".row-link");
      if (link) link.focus({ preventScroll: true });
      rs[current].scrollIntoView({ block: "nearest" });
    }
  }

  const currentRow = () => rows()[current] || null;

  function isField(el) {
    return !!el && (el.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName));
  }

  function click(selector) {
    const el = document.querySelector(selector);
    if (!el) return false;
    el.click();
    return true;
  }

  // The rows an action applies to: the selected ones, or else the current.
  function targets() {
    const checked = rows().filter((r) => r.querySelector('input[name="ids"]:checked'));
    if (checked.length) return checked;
    const row = currentRow();
    return row ? [row] : [];
  }

  // bulk submits the bulk form with an action for the target rows. Clicking
  // the button (rather than requestSubmit) lets htmx see which one it was.
  function bulk(action, rs) {
    const form = document.getElementById("bulk");
    const button = form && form.querySelector('button[name="action"][value="' + action + '"]');
    if (!button || !rs.length) return false;
    rs.forEach((r) => {
      r.querySelector('input[name="ids"]').checked = true;
    });
    button.click();
    return true;
  }

  function toggleRead() {
    const rs = targets();
    const anyUnread = rs.some((r) => r.dataset.unread === "true");
    return bulk(anyUnread ? "read" : "unread", rs);
  }

  function toggleHelp() {
    const dialog = document.getElementById("shortcuts");
    if (!dialog) return;
    if (dialog.open) dialog.close();
    else dialog.showModal();
  }

  document.addEventListener("keydown", (e) => {
    const t = e.target;
    if ((e.ctrlKey || e.metaKey) && e.key === "Enter" && t.matches && t.matches("[data-submit-on-ctrl-enter]")) {
      e.preventDefault();
      t.form.requestSubmit();
      return;
    }
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey) return;
    if (isField(t)) {
      if (e.key === "Escape") t.blur();
      return;
    }
    if (document.querySelector("dialog[open]")) return; // Esc closes it natively

    const key = e.key;
    const afterG = Date.now() - gPressedAt < 1000;
    gPressedAt = 0;
    let handled = true;
    switch (key) {
      case "j":
        setCurrent(current + 1);
        break;
      case "k":
        setCurrent(current - 1);
        break;
      case "o":
      case "Enter": {
        // Enter on a link or button does what it always does.
        if (key === "Enter" && t.closest && t.closest("a, button, summary")) return;
        const row = currentRow();
        handled = !!row && (row.querySelector(".row-link").click(), true);
        break;
      }
      case "x": {
        if (current < 0) setCurrent(0);
        const box = currentRow() && currentRow().querySelector('input[name="ids"]');
        if (box) box.checked = !box.checked;
        else handled = false;
        break;
      }
      case "e":
        handled = rows().length ? bulk("archive", targets()) : click('[data-shortcut="e"]');
        break;
      case "u":
        handled = rows().length ? toggleRead() : click('[data-shortcut="u"]');
        break;
      case "c":
        handled = click('[data-shortcut="c"]');
        break;
      case "g":
        gPressedAt = Date.now();
        break;
      case "i":
        handled = afterG && click('[data-testid="queue-all"]');
        break;
      case "/": {
        // The search box; its text is selected so typing replaces it.
        const search = document.getElementById("search");
        if (search) {
          search.focus();
          search.select();
        } else handled = false;
        break;
      }
      case "?":
        toggleHelp();
        break;
      default:
        handled = false;
    }
    if (handled) e.preventDefault();
  });

  // Keep the current row where the user is, whether they got there by
  // keyboard, by Tab or by clicking a checkbox.
  document.addEventListener("focusin", (e) => {
    const row = e.target.closest && e.target.closest(rowSelector);
    if (row) setCurrent(rows().indexOf(row), false);
  });

  document.addEventListener("click", (e) => {
    const t = e.target.closest && e.target.closest("[data-action]");
    if (!t) return;
    switch (t.dataset.action) {
      case "dismiss":
        t.closest(".flash").remove();
        break;
      case "shortcuts":
        toggleHelp();
        break;
    }
  });

  document.addEventListener("change", (e) => {
    const t = e.target;
    if (t.dataset.action === "select-all") {
      rows().forEach((r) => {
        r.querySelector('input[name="ids"]').checked = t.checked;
      });
      return;
    }
    const form = t.form;
    if (form && form.dataset.autosubmit === "true" && t.tagName === "SELECT") form.requestSubmit();
  });

  // enhance prepares content that arrived with the page or with a swap.
  function enhance(root) {
    // Times in the reader's time zone.
    root.querySelectorAll("time[datetime]").forEach((el) => {
      const d = new Date(el.getAttribute("datetime"));
      if (isNaN(d)) return;
      const local = d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
      if (el.dataset.local === "true") el.textContent = local;
      else if (el.title) el.title = local;
    });
    root.querySelectorAll(".flash[data-autohide]").forEach((el) => {
      setTimeout(() => el.remove(), 6000);
    });
    const invalid = root.querySelector('[aria-invalid="true"]');
    if (invalid && root !== document.body) invalid.focus();
  }

  // The tab's title leads with the Action count; keep it in step with the
  // sidebar when a swap changes it.
  function syncTitle() {
    const el = document.getElementById("count-action");
    if (!el) return;
    const n = parseInt(el.textContent, 10) || 0;
    const base = document.title.replace(/^\(\d+\) /, "");
    document.title = n > 0 ? "(" + n + ") " + base : base;
  }

  // Live updates (handlers/events.go, docs/readme/live.md). The page's event
  // stream (#live) carries "update" and "resync" messages, out-of-band swaps
  // that htmx makes, and "rows", "notify" and "delta" messages, handled here.

  const live = () => document.getElementById("live");

  // The SSE extension opens a new stream after an error response, from its
  // sse-connect URL: keep that URL at the page's position, as the browser's
  // own reconnection does with Last-Event-ID.
  function rememberPosition(id) {
    const el = live();
    if (!el || !id) return;
    const url = new URL(el.getAttribute("sse-connect"), location.href);
    if (url.searchParams.get("since") === id) return;
    url.searchParams.set("since", id);
    el.setAttribute("sse-connect", url.pathname + url.search);
  }

  // placeRows puts live rows where the listing's order (data-sort, newest
  // first) says, replacing the thread's old row, or takes rows out.
  function placeRows(html) {
    const list = document.getElementById("thread-rows");
    if (!list) return;
    const before = rows()[current];
    const currentID = before ? before.id : "";
    const tpl = document.createElement("template");
    tpl.innerHTML = html;
    Array.from(tpl.content.children).forEach((li) => {
      const old = document.getElementById(li.id);
      const box = old && old.querySelector('input[name="ids"]');
      const checked = !!box && box.checked;
      if (old) old.remove();
      if (li.dataset.live === "remove") return;
      const next = Array.from(list.querySelectorAll(":scope > .row")).find((r) => r.dataset.sort < li.dataset.sort);
      if (next) list.insertBefore(li, next);
      else if (!document.getElementById("load-more")) list.appendChild(li);
      else return; // older than this page's last row: it belongs to a later page
      if (checked) li.querySelector('input[name="ids"]').checked = true;
      if (window.htmx) htmx.process(li);
      enhance(li);
    });
    const any = !!list.querySelector(".row");
    list.hidden = !any;
    const empty = document.getElementById("empty-state");
    if (empty) empty.hidden = any;
    if (current >= 0) {
      const i = rows().findIndex((r) => r.id === currentID);
      setCurrent(i >= 0 ? i : current, false);
    }
  }

  function updateNotificationsButton() {
    const b = document.querySelector('[data-action="notifications"]');
    if (b) b.hidden = !("Notification" in window) || Notification.permission !== "default";
  }

  // notify shows a browser notification about a thread, unless the user is
  // looking at that very thread. Clicking it opens the thread.
  function notify(n) {
    if (!("Notification" in window) || Notification.permission !== "granted") return;
    if (document.visibilityState === "visible" && location.pathname === n.url) return;
    const note = new Notification(n.title, { body: n.body, tag: "pizza-thread-" + n.thread });
    note.onclick = () => {
      window.focus();
      note.close();
      location.assign(n.url);
    };
  }

  // appendDelta shows model text as it streams; the committed message
  // replaces it (ThreadStreamCleared).
  function appendDelta(d) {
    const el = document.getElementById("thread-stream");
    const thread = el && el.closest("[data-thread-id]");
    if (!thread || thread.dataset.threadId !== String(d.thread)) return;
    if (d.reset) el.textContent = "";
    el.style.whiteSpace = "pre-wrap";
    el.append(d.text);
  }

  document.addEventListener("htmx:sseBeforeMessage", (e) => {
    const msg = e.detail;
    rememberPosition(msg.lastEventId);
    if (!e.target.dataset || e.target.dataset.liveJs !== "true") return; // htmx swaps it
    e.preventDefault();
    try {
      const data = msg.type === "rows" ? msg.data : JSON.parse(msg.data);
      if (msg.type === "rows") placeRows(data);
      else if (msg.type === "notify") notify(data);
      else if (msg.type === "delta") appendDelta(data);
    } catch (err) {
      console.error("live update", msg.type, err);
    }
    syncTitle();
  });
  document.addEventListener("htmx:sseMessage", () => syncTitle());
  document.addEventListener("htmx:sseOpen", () => {
    const el = live();
    if (el) el.dataset.state = "open";
  });
  document.addEventListener("htmx:sseError", () => {
    const el = live();
    if (el) el.dataset.state = "reconnecting";
  });

  // A live render of the thread's parts does not know which listing the
  // page came from: keep the page's back link and the forms' "return".
  document.addEventListener("htmx:oobBeforeSwap", (e) => {
    const target = e.detail.target;
    if (target && target.id === "thread-activity") {
      // Keep the sub-agents the reader opened open across live updates.
      target.querySelectorAll("details[id^='subagent-']").forEach((d) => {
        const fresh = e.detail.fragment.querySelector("#" + CSS.escape(d.id));
        if (fresh) fresh.open = d.open;
      });
      return;
    }
    if (!target || !/^thread-(header|messages|pending|actions)$/.test(target.id)) return;
    const link = document.querySelector("#thread-header .back-link");
    const back = link && link.getAttribute("href");
    if (!back) return;
    e.detail.fragment.querySelectorAll(".back-link").forEach((a) => a.setAttribute("href", back));
    e.detail.fragment.querySelectorAll('input[name="return"]').forEach((i) => {
      i.value = back;
    });
  });

  document.addEventListener("click", (e) => {
    const b = e.target.closest && e.target.closest('[data-action="notifications"]');
    if (!b || !("Notification" in window)) return;
    Promise.resolve(Notification.requestPermission()).then(updateNotificationsButton, updateNotificationsButton);
  });
  document.addEventListener("htmx:afterSettle", updateNotificationsButton);
  document.addEventListener("DOMContentLoaded", updateNotificationsButton);
  if (document.readyState !== "loading") updateNotificationsButton();

  function init() {
    if (!window.htmx) {
      enhance(document.body);
      return;
    }
    htmx.onLoad((elt) => enhance(elt));
    document.body.addEventListener("htmx:afterSettle", (e) => {
      const target = e.detail.target;
      if (target === document.body) {
        current = -1; // a new page
        const select = document.querySelector(".select-all");
        if (select) select.checked = false;
      } else if (target && target.id === "thread-list" && current >= 0) {
        // After a bulk action, stay at the same position: the next thread.
        setCurrent(current);
        const select = document.querySelector(".select-all");
        if (select) select.checked = false;
      }
      syncTitle();
    });
  }

  // A submit button with data-confirm asks first (the bulk Delete): its
  // form's hx-confirm would ask for every action of the toolbar. Capture
  // runs before htmx's own submit listener on the form.
  document.addEventListener(
    "submit",
    (e) => {
      const b = e.submitter;
      if (b && b.dataset.confirm && !window.confirm(b.dataset.confirm)) {
        e.preventDefault();
        e.stopImmediatePropagation();
      }
    },
    true,
  );

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
