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
    syncBulk();
    button.click();
    return true;
  }

  // The bulk actions wait until a row is selected: until then they are
  // inactive (aria-disabled, dimmed by app.css) and do nothing.
  function syncBulk() {
    const form = document.getElementById("bulk");
    if (!form) return;
    const any = rows().some((r) => r.querySelector('input[name="ids"]:checked'));
    form.querySelectorAll('.toolbar button[name="action"], .toolbar select').forEach((el) => {
      if (any) el.removeAttribute("aria-disabled");
      else el.setAttribute("aria-disabled", "true");
    });
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
    if (e.key === "Escape" && t.closest && t.closest(".row-decide")) {
      closeDecision(t.closest(rowSelector), true);
      e.preventDefault();
      return;
    }

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
        // Enter on a waiting row opens its decision form in place (o opens
        // the thread); on any other link or button it does what it always
        // does.
        const onRow = t.classList && t.classList.contains("row-link") ? t.closest(rowSelector) : null;
        if (key === "Enter" && t.closest && t.closest("a, button, summary") && !(onRow && canDecide(onRow))) return;
        const row = onRow || currentRow();
        if (key === "Enter" && row && canDecide(row)) {
          openDecision(row);
          if (onRow) enterOnRow = true; // the link must not follow too
          break;
        }
        handled = !!row && (row.querySelector(".row-link").click(), true);
        break;
      }
      case "x": {
        if (current < 0) setCurrent(0);
        const box = currentRow() && currentRow().querySelector('input[name="ids"]');
        if (box) box.checked = !box.checked;
        else handled = false;
        syncBulk();
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

  // Enter on a waiting row's link opens its decision form; the link's own
  // activation by that Enter (some browsers fire it despite the keydown's
  // preventDefault) is stopped until the key is released.
  let enterOnRow = false;
  document.addEventListener("keyup", (e) => {
    if (e.key === "Enter") enterOnRow = false;
  });
  document.addEventListener(
    "click",
    (e) => {
      if (enterOnRow && e.target.closest && e.target.closest(".row-link")) {
        e.preventDefault();
        e.stopPropagation();
      }
    },
    true,
  );

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
      case "decide": {
        const row = t.closest(rowSelector);
        if (t.getAttribute("aria-expanded") === "true") closeDecision(row, false);
        else openDecision(row);
        break;
      }
    }
  });

  // Deciding in a listing (views.RowDecision). A waiting row's Decide
  // button, or Enter on the row, fetches its decision form into the row:
  // the thread page's forms, every argument in full. Nothing is decided
  // by a key alone: the form's buttons decide. The answer replaces the row
  // (or removes it when it leaves the listing), and focus moves to the
  // next waiting row.

  const decideButton = (row) => row && row.querySelector('[data-action="decide"]');
  const canDecide = (row) => row.dataset.status === "waiting" && !!decideButton(row);

  function openDecision(row) {
    const button = decideButton(row);
    const panel = row && row.querySelector(".row-decide");
    if (!button || !panel || !window.htmx) return;
    setCurrent(rows().indexOf(row), false);
    if (!panel.hidden && panel.firstElementChild) {
      focusDecision(panel); // already open
      return;
    }
    button.setAttribute("aria-expanded", "true");
    panel.hidden = false;
    panel.setAttribute("aria-busy", "true");
    // The keyboard goes in once htmx has settled the form: only then
    // does it send it (before, a click would post it as a plain form).
    const settled = () => {
      panel.removeAttribute("aria-busy");
      focusDecision(panel);
    };
    panel.addEventListener("htmx:afterSettle", settled, { once: true });
    htmx.ajax("GET", button.dataset.url, { source: button, target: panel, swap: "innerHTML" }).then(() => {
      // Refused (the thread is gone, say): the flash area says why.
      if (panel.firstElementChild) return;
      panel.removeEventListener("htmx:afterSettle", settled);
      panel.removeAttribute("aria-busy");
      closeDecision(row, true);
    });
  }

  function closeDecision(row, focusRow) {
    const button = decideButton(row);
    const panel = row && row.querySelector(".row-decide");
    if (!button || !panel) return;
    button.setAttribute("aria-expanded", "false");
    panel.hidden = true;
    panel.textContent = "";
    if (focusRow) row.querySelector(".row-link").focus();
  }

  // focusDecision puts the keyboard in a decision form that just opened: in
  // the answer box of a question, else on the form itself, whose buttons
  // come next with Tab.
  function focusDecision(panel) {
    if (panel.hidden || !panel.isConnected) return;
    const answer = panel.querySelector('[data-testid="respond-form"] textarea');
    (answer || panel).focus({ preventScroll: true });
    panel.scrollIntoView({ block: "nearest" });
  }

  // A decision sent from a row: once htmx has swapped its answer in, move
  // on from the row. The request's own "load" event is the signal: htmx's
  // afterRequest event does not reach the document when a live update took
  // the row out first.
  document.addEventListener("htmx:beforeRequest", (e) => {
    const form = e.detail.elt;
    const panel = form && form.closest && form.closest(".row-decide");
    if (!panel || e.detail.requestConfig.verb !== "post") return;
    const row = panel.closest(rowSelector);
    const rs = rows();
    const i = rs.indexOf(row);
    const d = { id: row.id, after: rs.slice(i + 1).map((r) => r.id), before: rs.slice(0, i).map((r) => r.id) };
    const xhr = e.detail.xhr;
    xhr.addEventListener("load", () => {
      // htmx's own load handler, registered first, has swapped by now.
      setTimeout(() => {
        if (xhr.status >= 200 && xhr.status < 300) afterDecision(d);
        else if (xhr.status === 422) refusedDecision(d);
      }, 0);
    });
  });

  // refusedDecision keeps the keyboard in a refused form, which came back
  // into the row with the reason next to it.
  function refusedDecision(d) {
    const row = document.getElementById(d.id);
    const panel = row && row.querySelector(".row-decide");
    if (panel && !panel.contains(document.activeElement)) {
      (panel.querySelector('[aria-invalid="true"]') || panel).focus();
    }
  }

  function afterDecision(d) {
    syncListing();
    const row = document.getElementById(d.id);
    const panel = row && row.querySelector(".row-decide");
    if (panel && !panel.hidden) {
      // Other calls of the same run still wait: stay in its form.
      setCurrent(rows().indexOf(row), false);
      focusDecision(panel);
      return;
    }
    const live = (ids) => ids.map((id) => document.getElementById(id)).filter((r) => r && r.matches(rowSelector));
    const later = live(d.after);
    const earlier = live(d.before);
    const next =
      later.find((r) => r.dataset.status === "waiting") ||
      earlier.find((r) => r.dataset.status === "waiting") ||
      (row && row.isConnected ? null : later[0] || earlier[earlier.length - 1]);
    if (next) {
      setCurrent(rows().indexOf(next));
    } else if (row && row.isConnected) {
      setCurrent(rows().indexOf(row));
    } else {
      current = -1;
      const empty = document.getElementById("empty-state");
      const main = document.getElementById("main");
      if (empty && !empty.hidden) {
        empty.setAttribute("tabindex", "-1");
        empty.focus();
      } else if (main) main.focus();
    }
  }

  // syncListing shows the listing's empty state when its last row is gone.
  function syncListing() {
    const list = document.getElementById("thread-rows");
    if (!list) return;
    const any = !!list.querySelector(".row");
    list.hidden = !any;
    const empty = document.getElementById("empty-state");
    if (empty) empty.hidden = any;
  }

  document.addEventListener("change", (e) => {
    const t = e.target;
    if (t.dataset.action === "select-all") {
      rows().forEach((r) => {
        r.querySelector('input[name="ids"]').checked = t.checked;
      });
      syncBulk();
      return;
    }
    if (t.name === "ids") syncBulk();
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
    // Deadlines: "Thu 14:00" in the reader's zone (with the date beyond
    // a week), and their countdowns.
    root.querySelectorAll("time[data-deadline]").forEach((el) => {
      const d = new Date(el.getAttribute("datetime"));
      if (isNaN(d)) return;
      const far = Math.abs(d - Date.now()) > 6 * 864e5;
      el.textContent = d.toLocaleString(undefined, far
        ? { weekday: "short", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" }
        : { weekday: "short", hour: "2-digit", minute: "2-digit" });
      el.title = d.toLocaleString(undefined, { dateStyle: "full", timeStyle: "short" });
    });
    tickCountdowns(root);
    root.querySelectorAll(".flash[data-autohide]").forEach((el) => {
      setTimeout(() => el.remove(), 6000);
    });
    const invalid = root.querySelector('[aria-invalid="true"]');
    if (invalid && root !== document.body) invalid.focus();
  }

  // tickCountdowns writes how long until each deadline under root: "in
  // 1h 59m", "in 3d 4h", "overdue" (views.countdown says the same).
  function tickCountdowns(root) {
    root.querySelectorAll("[data-countdown]").forEach((el) => {
      const d = new Date(el.dataset.countdown) - Date.now();
      let text;
      if (isNaN(d)) return;
      if (d <= 0) text = "overdue";
      else if (d < 36e5) text = "in " + Math.ceil(d / 6e4) + "m";
      else if (d < 864e5) text = "in " + Math.floor(d / 36e5) + "h " + Math.floor((d % 36e5) / 6e4) + "m";
      else text = "in " + Math.floor(d / 864e5) + "d " + Math.floor((d % 864e5) / 36e5) + "h";
      if (el.textContent !== text) el.textContent = text;
      el.classList.toggle("countdown-overdue", d <= 0);
    });
  }
  setInterval(() => tickCountdowns(document), 15000);

  // The tab's title leads with the Action count; keep it in step with the
  // sidebar when a swap changes it.
  function syncTitle() {
    const el = document.getElementById("count-action");
    if (!el) return;
    const n = parseInt(el.textContent, 10) || 0;
    const base = document.title.replace(/^\(\d+\) /, "");
    document.title = n > 0 ? "(" + n + ") " + base : base;
    watchAction(n);
  }

  // Screen readers hear when runs start waiting for the reader: one short,
  // polite message ("2 runs wait for you") in #announcer, a while after the
  // Action count last grew, however many rows arrived meanwhile. A count
  // that shrinks (the reader decided) says nothing.
  let actionKnown = null; // the Action count the reader was last told or shown
  let announceTimer = 0;
  const actionCount = () => parseInt((document.getElementById("count-action") || {}).textContent, 10) || 0;

  function watchAction(n) {
    if (actionKnown === null || n <= actionKnown) {
      if (actionKnown === null || !announceTimer) actionKnown = n;
      return;
    }
    clearTimeout(announceTimer);
    announceTimer = setTimeout(() => {
      announceTimer = 0;
      const m = actionCount();
      if (m > actionKnown) announce(m === 1 ? "1 run waits for you" : m + " runs wait for you");
      actionKnown = m;
    }, 1500);
  }

  function announce(msg) {
    const el = document.getElementById("announcer");
    if (!el) return;
    el.textContent = "";
    setTimeout(() => {
      el.textContent = msg;
    }, 50);
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
      // An open decision form stays open, with what was typed in it, while
      // the run still waits; the server refuses a decision on a call that
      // has moved on.
      const panel = old && old.querySelector(".row-decide:not([hidden])");
      const keep = panel && li.dataset.status === "waiting" && li.querySelector(".row-decide") ? panel : null;
      const focused = keep && keep.contains(document.activeElement) ? document.activeElement : null;
      const hadFocus = !!old && old.contains(document.activeElement);
      if (old) old.remove();
      if (li.dataset.live === "remove") return;
      const next = Array.from(list.querySelectorAll(":scope > .row")).find((r) => r.dataset.sort < li.dataset.sort);
      if (next) list.insertBefore(li, next);
      else if (!document.getElementById("load-more")) list.appendChild(li);
      else return; // older than this page's last row: it belongs to a later page
      if (checked) li.querySelector('input[name="ids"]').checked = true;
      if (keep) {
        li.querySelector(".row-decide").replaceWith(keep);
        decideButton(li).setAttribute("aria-expanded", "true");
      }
      if (window.htmx) htmx.process(li);
      enhance(li);
      if (focused) focused.focus({ preventScroll: true });
      else if (hadFocus) li.querySelector(".row-link").focus({ preventScroll: true });
    });
    syncListing();
    syncBulk();
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
  // A page kept in the back/forward cache must not keep its event stream
  // open: over HTTP/1.1 a browser opens six connections to a server at
  // most, and six cached pages would leave none for the next page (it
  // waited a minute for one). The stream closes when the page is hidden
  // and opens again, from where it was, if the page comes back.
  let liveSource = null; // the stream's EventSource (htmx's SSE extension)
  let parkedLive = null;
  window.addEventListener("pagehide", () => {
    const el = live();
    if (!el || !liveSource) return;
    liveSource.close();
    liveSource = null;
    parkedLive = el.cloneNode(true);
    el.remove();
  });
  window.addEventListener("pageshow", (e) => {
    if (!e.persisted || !parkedLive || !window.htmx) return;
    document.body.appendChild(parkedLive);
    htmx.process(parkedLive);
    parkedLive = null;
  });
  document.addEventListener("htmx:sseMessage", () => syncTitle());
  document.addEventListener("htmx:sseOpen", (e) => {
    liveSource = e.detail.source;
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
    actionKnown = document.getElementById("count-action") ? actionCount() : null;
    syncBulk();
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
      syncBulk();
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
      if (b && b.getAttribute("aria-disabled") === "true") {
        e.preventDefault();
        e.stopImmediatePropagation();
        return;
      }
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
