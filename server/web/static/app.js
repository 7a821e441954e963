// hiveboard web board: live updates from server-sent events, "more" in columns, lease countdowns, presence.
// Pages are whole without this script; it only keeps them current.
//
// A page may miss updates: those made between its rendering and its stream's start, and those sent while
// its stream was down. So the page knows the newest board event it shows (`at`: in data-live, then from
// each reload's x-board-at header) and each stream starts by naming the newest one now (`hello`): when
// that is newer, the page reloads its main part.
(function () {
  "use strict";
  const body = document.body;
  const live = body.dataset.live ? JSON.parse(body.dataset.live) : null;
  const dot = document.getElementById("live");
  let at = live && live.at ? live.at : 0;

  function matches(card, filters) {
    if (!filters) return true;
    if (filters.type && card.dataset.type !== filters.type) return false;
    if (filters.label && !JSON.parse(card.dataset.labels || "[]").includes(filters.label)) return false;
    if (filters.agent && !JSON.parse(card.dataset.people || "[]").includes(filters.agent)) return false;
    return true;
  }

  // a column's order: done newest first (key = updated time), others by priority then id
  function before(a, b, status) {
    const ka = parseFloat(a.dataset.key), kb = parseFloat(b.dataset.key);
    const ia = parseInt(a.dataset.id, 10), ib = parseInt(b.dataset.id, 10);
    if (status === "done") return ka > kb || (ka === kb && ia > ib);
    return ka > kb || (ka === kb && ia < ib);
  }

  function place(el, status) {
    const col = document.querySelector("#col-" + status + " ol.cards");
    if (!col) return;
    const more = document.querySelector("#col-" + status + " .more");
    let spot = null;
    for (const other of col.children) {
      if (before(el, other, status)) { spot = other; break; }
    }
    if (!spot && more && col.children.length) return; // beyond the loaded page: "more" will bring it
    col.insertBefore(el, spot);
    el.classList.add("flash-in");
    setTimeout(() => el.classList.remove("flash-in"), 1500);
  }

  function applyCards(data) {
    const filters = live.filters || {};
    const filtered = Object.keys(filters).length > 0;
    for (const id of data.gone) {
      const old = document.getElementById("card-" + id);
      if (old) old.remove();
    }
    for (const c of data.cards) {
      const old = document.getElementById("card-" + c.id);
      if (old) old.remove();
      const tmp = document.createElement("template");
      tmp.innerHTML = c.html;
      const el = tmp.content.firstElementChild;
      if (matches(el, filters)) place(el, c.status);
    }
    if (!filtered) setCounts(data.counts);  // a filtered page gets its own counts as a "counts" event
    tick();
  }

  function setCounts(counts) {
    for (const [status, n] of Object.entries(counts)) setCount(status, n);
  }

  // the server counts at most 50 distinct filters per update; past them it sends null and the page asks
  // for its own counts, at most once a second
  let counting = null;
  function fetchCounts() {
    if (counting) return;
    counting = setTimeout(() => {
      const q = new URLSearchParams(live.filters || {}).toString();
      fetch("/board/counts?" + q, { credentials: "same-origin" }).then(r => r.json()).then(setCounts)
        .catch(() => {}).finally(() => { counting = null; });
    }, 1000);
  }

  function setCount(status, n) {
    const el = document.getElementById("count-" + status);
    if (el) el.textContent = n;
    const tab = document.getElementById("tab-count-" + status);  // the column switcher (pages.switcher)
    if (tab) {
      tab.textContent = n;
      if (status === "needs_human") tab.parentElement.classList.toggle("urgent", Number(n) > 0);
    }
  }

  // the column switcher: a tap brings its column into the board's view (sideways only: the page stays where
  // it is), and the column most in view is marked as the current one
  const board = document.getElementById("board");
  function inView() {
    if (!board) return;
    const left = board.getBoundingClientRect().left;
    let best = null, bestShown = -1;
    for (const col of board.querySelectorAll(".column")) {
      const r = col.getBoundingClientRect();
      const shown = Math.min(r.right, left + board.clientWidth) - Math.max(r.left, left);
      if (shown > bestShown) { best = col; bestShown = shown; }
    }
    for (const tab of document.querySelectorAll(".switcher a")) {
      if (best && tab.dataset.status === best.dataset.status) tab.setAttribute("aria-current", "true");
      else tab.removeAttribute("aria-current");
    }
  }
  if (board) {
    board.addEventListener("scroll", () => requestAnimationFrame(inView), { passive: true });
    window.addEventListener("resize", inView);
    document.addEventListener("click", e => {
      const tab = e.target.closest(".switcher a[data-status]");
      const col = tab && document.getElementById("col-" + tab.dataset.status);
      if (!col) return;
      e.preventDefault();
      board.scrollTo({ left: col.offsetLeft - board.firstElementChild.offsetLeft, behavior: "smooth" });
    });
    inView();
  }

  // a link to a part of a folded section (a card page's "read the files") opens its fold first
  function unfold() {
    const target = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    for (let d = target && target.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) d.open = true;
    if (target) target.scrollIntoView();
  }
  window.addEventListener("hashchange", unfold);
  if (location.hash) unfold();

  // this page's main part, fetched again: one fetch at a time (so an older answer never lands after a
  // newer one), and a change that comes while one is under way fetches once more after it
  let reloading = null, fetching = false, again = false;
  function reloadMain(delay) {
    if (fetching) { again = true; return; }
    if (reloading) return;
    reloading = setTimeout(fetchMain, delay);
  }

  function fetchMain() {
    reloading = null;
    fetching = true;
    // redirect "manual": a session that ended answers with the login page, which must not land in <main>
    fetch(location.href, { headers: { "X-Fragment": "main" }, credentials: "same-origin", cache: "no-store", redirect: "manual" })
      .then(r => {
        if (!r.ok) return null;
        const seen = parseInt(r.headers.get("x-board-at") || "0", 10);
        if (seen > at) at = seen;
        return r.text();
      })
      .then(html => { if (html !== null) swapMain(html); })
      .catch(() => {})
      .finally(() => {
        fetching = false;
        if (again) { again = false; reloadMain(150); }
      });
  }

  // what the person was doing in the old main part survives the new one: open sections, what they typed
  // (fields they left alone take the new values), and where the cursor was
  function swapMain(html) {
    const main = document.getElementById("main");
    // a fold is known by its id (its summary's counts change), any other details by its summary
    const name = d => d.id || d.querySelector("summary")?.textContent;
    const open = Array.from(main.querySelectorAll("details[open]")).map(name);
    const key = el => (el.form ? el.form.getAttribute("action") : "") + "|" + el.name;
    const typed = new Map();
    for (const el of main.querySelectorAll("form textarea[name], form input[name]:not([type=hidden]), form select[name]")) {
      const changed = el.tagName === "SELECT"
        ? Array.from(el.options).some(o => o.selected !== o.defaultSelected)
        : (el.type === "checkbox" || el.type === "radio") ? el.checked !== el.defaultChecked : el.value !== el.defaultValue;
      if (changed) typed.set(key(el), el);
    }
    const active = document.activeElement && main.contains(document.activeElement) && document.activeElement.name
      ? key(document.activeElement) : null;
    const caret = active && typeof document.activeElement.selectionStart === "number"
      ? [document.activeElement.selectionStart, document.activeElement.selectionEnd] : null;
    main.innerHTML = html;
    for (const d of main.querySelectorAll("details")) {
      if (open.includes(name(d))) d.open = true;
    }
    for (const el of main.querySelectorAll("form textarea[name], form input[name]:not([type=hidden]), form select[name]")) {
      const old = typed.get(key(el));
      if (old) {
        if (el.type === "checkbox" || el.type === "radio") el.checked = old.checked; else el.value = old.value;
      }
      if (active && key(el) === active) {
        el.focus();
        if (caret && typeof el.setSelectionRange === "function") { try { el.setSelectionRange(caret[0], caret[1]); } catch (e) { /* not a text field */ } }
      }
    }
    tick();
  }

  function onChange(change) {
    if (live.page === "task") {
      if (change.tasks.includes(live.task) || change.reviews.includes(live.task) || change.threads.includes(live.task)) reloadMain(150);
    } else if (live.page === "messages") {
      if (change.pool) reloadMain(300);
    } else if (live.page === "agents") {
      if (change.tasks.length || change.reviews.length) reloadMain(1000);
    } else if (live.page === "metrics") {
      if (change.reviews.length) reloadMain(2000);
    }
  }

  function connect() {
    if (!live || !window.EventSource) return;
    // a filtered board names its filter, and the server counts its columns once per update for all such pages
    const filters = live.page === "board" ? (live.filters || {}) : {};
    const q = new URLSearchParams(filters).toString();
    const es = new EventSource("/events" + (q ? "?" + q : ""));
    es.addEventListener("hello", e => {
      if (dot) dot.classList.add("on");
      body.dataset.connected = "1";
      const now = JSON.parse(e.data || "{}").at || 0;
      if (now > at) { at = now; reloadMain(0); }  // changed since this page was rendered or last heard
    });
    es.addEventListener("cards", e => { if (live.page === "board") applyCards(JSON.parse(e.data)); });
    es.addEventListener("counts", e => {
      if (live.page !== "board") return;
      const counts = JSON.parse(e.data);
      if (counts) setCounts(counts); else fetchCounts();
    });
    es.addEventListener("change", e => onChange(JSON.parse(e.data)));
    es.onerror = () => { if (dot) dot.classList.remove("on"); body.dataset.connected = ""; };
  }

  // as pages.ago says it
  function ago(s) {
    s = Math.max(0, Math.floor(s));
    if (s < 60) return "just now";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    if (s < 2 * 86400) return Math.floor(s / 3600) + " h ago";
    return Math.floor(s / 86400) + " days ago";
  }

  // lease countdowns and presence: a local clock, no requests
  function tick() {
    const now = Date.now() / 1000;
    for (const el of document.querySelectorAll("[data-lease]")) {
      const left = Math.round(parseFloat(el.dataset.lease) - now);
      el.textContent = left > 0 ? "lease " + Math.floor(left / 60) + ":" + String(left % 60).padStart(2, "0") : "lease over";
      el.classList.toggle("late", left < 60);
    }
    for (const el of document.querySelectorAll("[data-window]")) {  // as pages.presence_of says it
      const seen = parseFloat(el.dataset.seen), waiting = parseFloat(el.dataset.waiting);
      const present = waiting >= now || (seen > 0 && now - seen <= parseFloat(el.dataset.window));
      el.textContent = waiting >= now ? "waiting for messages" : !seen ? "never seen" : present ? "online" : "last seen " + ago(now - seen);
      const row = el.closest("tr");
      if (row) { row.classList.toggle("present", present); row.classList.toggle("away", !present); }
    }
  }

  document.addEventListener("click", e => {
    const more = e.target.closest("a.more[data-column]");
    if (!more) return;
    e.preventDefault();
    fetch(more.href, { credentials: "same-origin", headers: { "X-Fragment": "column" } }).then(r => r.text()).then(html => {
      const tmp = document.createElement("template");
      tmp.innerHTML = html;
      const section = tmp.content.querySelector("section.column");
      const col = document.querySelector("#col-" + more.dataset.column + " ol.cards");
      for (const li of Array.from(section.querySelectorAll("li.card"))) {
        if (!document.getElementById(li.id)) col.appendChild(li);
      }
      const next = section.querySelector("a.more");
      if (next) more.replaceWith(next); else more.remove();
      tick();
    }).catch(() => {});
  });

  // Pass asks first, naming what it approves; once confirmed, the form carries the `confirm` field that names
  // that hand-in (without this script the board answers with a confirmation page instead)
  document.addEventListener("submit", e => {
    const button = e.submitter;
    if (!button || !button.dataset.confirm || !e.target.matches("form.decide")) return;
    e.preventDefault();
    if (!window.confirm(button.dataset.confirm)) return;
    const form = e.target;
    let field = form.querySelector("input[name=confirm]");
    if (!field) {
      field = document.createElement("input");
      field.type = "hidden";
      field.name = "confirm";
      form.appendChild(field);
    }
    field.value = button.dataset.key;
    const decision = document.createElement("input");  // the button's own name and value, as a click sends them
    decision.type = "hidden";
    decision.name = button.name;
    decision.value = button.value;
    form.appendChild(decision);
    form.submit();  // submit() sends the form as it is, without this handler again
  });

  // a page the browser kept and shows again (Back): what it shows is as old as when it was left
  window.addEventListener("pageshow", e => { if (e.persisted && live) reloadMain(0); });

  tick();
  setInterval(tick, 1000);
  connect();
})();
