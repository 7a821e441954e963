// hiveboard web board: live updates from server-sent events, "more" in columns, lease countdowns.
// Pages are whole without this script; it only keeps them current.
(function () {
  "use strict";
  const body = document.body;
  const live = body.dataset.live ? JSON.parse(body.dataset.live) : null;
  const dot = document.getElementById("live");

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
  }

  let reloading = null;
  function reloadMain(delay) {
    // another page's part changed: fetch this page's main part again (at most once per `delay`)
    if (reloading) return;
    reloading = setTimeout(() => {
      reloading = null;
      fetch(location.href, { headers: { "X-Fragment": "main" }, credentials: "same-origin" })
        .then(r => (r.ok ? r.text() : null)).then(html => {
          if (html === null) return;
          const open = Array.from(document.querySelectorAll("#main details[open]")).map(d => d.querySelector("summary")?.textContent);
          const main = document.getElementById("main");
          main.innerHTML = html;
          for (const d of main.querySelectorAll("details")) {
            if (open.includes(d.querySelector("summary")?.textContent)) d.open = true;
          }
          tick();
        }).catch(() => {});
    }, delay);
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
    es.addEventListener("hello", () => { if (dot) dot.classList.add("on"); body.dataset.connected = "1"; });
    es.addEventListener("cards", e => { if (live.page === "board") applyCards(JSON.parse(e.data)); });
    es.addEventListener("counts", e => {
      if (live.page !== "board") return;
      const counts = JSON.parse(e.data);
      if (counts) setCounts(counts); else fetchCounts();
    });
    es.addEventListener("change", e => onChange(JSON.parse(e.data)));
    es.onerror = () => { if (dot) dot.classList.remove("on"); body.dataset.connected = ""; };
  }

  // lease countdowns: a local clock, no requests
  function tick() {
    const now = Date.now() / 1000;
    for (const el of document.querySelectorAll("[data-lease]")) {
      const left = Math.round(parseFloat(el.dataset.lease) - now);
      el.textContent = left > 0 ? "lease " + Math.floor(left / 60) + ":" + String(left % 60).padStart(2, "0") : "lease over";
      el.classList.toggle("late", left < 60);
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

  tick();
  setInterval(tick, 1000);
  connect();
})();
