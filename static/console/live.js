// Live updates: the connection indicator, a resync request on every (re)connect, and pushes that
// never take away what a person is typing. The server re-renders cards from saved state; this file
// only reports where the page is and keeps form input across out-of-band swaps.
(function () {
  // The indicator says what the socket is doing, never more: connected ("Live"), reconnecting with the time of
  // the next try, unreachable (the browser is offline, or tries keep failing) with the next try, or stopped for
  // good (the server will not take this page back). Every reconnect is scheduled here, for every close code:
  // htmx's extension retries only a few (1006, 1011–1013) and a close with 1001 would otherwise never retry.
  var opens = 0, failures = 0, stopped = false, api = null, current = null, timer = null, caughtUp = 0;
  var words = {
    connecting: "Connecting…",
    live: "Live",
    reconnecting: "Reconnecting — next try at ",
    unreachable: "Server unreachable — next try at ",
    offline: "Offline — live updates resume when the network returns",
    stopped: "Live updates stopped — reload the page",
  };
  function clock(ms) {
    var d = new Date(ms), pad = function (n) { return (n < 10 ? "0" : "") + n; };
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }
  function show(state, at) {
    var el = document.getElementById("live-indicator");
    if (!el) return;
    el.className = "live-indicator " + state;
    el.dataset.state = state;
    el.textContent = words[state];
    if (at) {
      var t = document.createElement("time");
      t.setAttribute("datetime", new Date(at).toISOString());
      t.textContent = clock(at);
      el.appendChild(t);
    }
  }
  function lastEvent() {
    var cursor = document.getElementById("live-cursor");
    return cursor ? parseInt(cursor.dataset.lastEvent || "0", 10) : 0;
  }
  // Reconnect quickly after a restart, backing off to at most ~8 s, with jitter.
  function delay(n) {
    var ceiling = Math.min(500 * Math.pow(2, n), 8000);
    return ceiling / 2 + Math.random() * ceiling / 2;
  }
  function open() {
    return current !== null && current.readyState === 1;
  }
  function attempt() {
    clearTimeout(timer);
    timer = null;
    if (stopped || !api || open()) return;
    show("connecting");
    api.reconnect();
  }
  function schedule() {
    clearTimeout(timer);
    if (navigator.onLine === false) { timer = null; show("offline"); return; }  // the `online` event tries
    var at = Date.now() + delay(failures - 1);
    timer = setTimeout(attempt, at - Date.now());
    // One close is a restart or a dropped connection; tries that keep failing mean the server is not answering.
    show(failures > 2 ? "unreachable" : "reconnecting", at);
  }
  if (window.htmx) {
    // The extension's own retry timer would race the one above: it is left to wait (the longest timer there is).
    htmx.config.wsReconnectDelay = function () { return 2147483647; };
  }
  document.addEventListener("htmx:wsConnecting", function () { if (!stopped && !timer) show("connecting"); });
  document.addEventListener("htmx:wsOpen", function (e) {
    api = e.detail.socketWrapper;
    current = e.detail.event && e.detail.event.target;
    opens += 1;
    failures = 0;
    clearTimeout(timer);
    timer = null;
    show("live");
    api.send(JSON.stringify({ type: "resync", last_event: lastEvent(), reconnect: opens > 1 }), e.detail.elt);
  });
  document.addEventListener("htmx:wsClose", function (e) {
    var socket = e.detail.event && e.detail.event.target, code = e.detail.event && e.detail.event.code;
    api = e.detail.socketWrapper || api;
    // A socket replaced by a newer one that is open (or opening) says nothing about the connection now.
    if (current && socket && socket !== current && current.readyState < 2) return;
    if (stopped) return;
    // 4401 signed out, 4403 access gone, 4429 too many resyncs: the server will not take this page back.
    if (code === 4403 || code === 4401 || code === 4429) {
      stopped = true;
      clearTimeout(timer);
      show("stopped");
      return;
    }
    failures += 1;
    schedule();
  });
  // What arrives over the socket proves it is connected, whatever the last network event said.
  document.addEventListener("htmx:wsAfterMessage", function () {
    var el = document.getElementById("live-indicator");
    if (!stopped && open() && el && el.dataset.state !== "live") show("live");
  });
  window.addEventListener("offline", function () {
    if (stopped) return;
    clearTimeout(timer);
    timer = null;
    show("offline");
  });
  window.addEventListener("online", function () {
    if (stopped) return;
    if (open()) {
      // The socket lived through it: say so, and catch up on anything the page may have missed meanwhile
      // (at most once in a few seconds: a flapping network must not spend the socket's resync budget).
      show("live");
      if (Date.now() - caughtUp > 3000) {
        caughtUp = Date.now();
        api.send(JSON.stringify({ type: "resync", last_event: lastEvent(), reconnect: false }));
      }
    } else {
      attempt();
    }
  });

  // A control the server could not serve for want of a database connection (503 database_busy): htmx swaps
  // nothing into the card, so the server's sentence (nothing was changed) is shown with the header's warnings.
  document.addEventListener("htmx:responseError", function (e) {
    var xhr = e.detail.xhr, region = document.getElementById("ops-alerts");
    if (!xhr || xhr.status !== 503 || !region) return;
    var old = region.querySelector('[data-alert="database_busy"]');
    if (old) old.remove();
    var line = document.createElement("p");
    line.className = "ops-alert";
    line.setAttribute("role", "alert");
    line.dataset.alert = "database_busy";
    line.textContent = xhr.responseText;
    region.appendChild(line);
  });
  // The next answer that arrives means the server is serving again: the busy line has said what it had to.
  document.addEventListener("htmx:afterRequest", function (e) {
    if (!e.detail.successful) return;
    var old = document.querySelector('#ops-alerts [data-alert="database_busy"]');
    if (old) old.remove();
  });
  // The reconnect notice can be dismissed; it sits in the page flow and never covers controls.
  document.addEventListener("click", function (e) {
    var button = e.target.closest && e.target.closest("[data-dismiss]");
    if (!button) return;
    var box = document.getElementById(button.dataset.dismiss);
    if (box) box.hidden = true;
  });

  // --- keeping what a person types across pushes ---------------------------------------------
  function fields(root) {
    return Array.prototype.filter.call(root.querySelectorAll("input, textarea, select"), function (el) {
      return el.type !== "hidden" && el.type !== "submit" && el.name;
    });
  }
  function dirty(el) {
    if (el.type === "checkbox" || el.type === "radio") return el.checked !== el.defaultChecked;
    if (el.tagName === "SELECT") {
      return Array.prototype.some.call(el.options, function (o) { return o.selected !== o.defaultSelected; });
    }
    return el.value !== el.defaultValue;
  }
  function editing(root) {
    var active = document.activeElement;
    var focused = active && root.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName);
    return focused || fields(root).some(dirty);
  }
  function key(el) {
    var form = el.form;
    return (form ? form.getAttribute("action") || "" : "") + "|" + el.name + "|" + (el.type === "checkbox" ? el.value : "");
  }
  function carry(from, to) {
    var typed = {};
    fields(from).forEach(function (el) { if (dirty(el)) typed[key(el)] = el; });
    fields(to).forEach(function (el) {
      var old = typed[key(el)];
      if (!old) return;
      if (el.type === "checkbox" || el.type === "radio") el.checked = old.checked;
      else el.value = old.value;
    });
  }
  // A card an action answers with (a plain htmx swap) keeps the sections a person had opened.
  var opened = null;
  document.addEventListener("htmx:beforeSwap", function (e) {
    var target = e.detail.target;
    opened = {};
    if (!target) return;
    var all = target.matches && target.matches("details[id]") ? [target] : [];
    Array.prototype.push.apply(all, target.querySelectorAll ? target.querySelectorAll("details[id]") : []);
    all.forEach(function (d) { opened[d.id] = d.open; });
  });
  document.addEventListener("htmx:afterSwap", function () {
    if (!opened) return;
    Object.keys(opened).forEach(function (id) {
      var d = document.getElementById(id);
      if (d && d.tagName === "DETAILS" && opened[id]) d.open = true;
    });
    opened = null;
  });
  var refocus = null;
  document.addEventListener("htmx:oobBeforeSwap", function (e) {
    var target = e.detail.target, fragment = e.detail.fragment;
    if (!target || !fragment || !target.id) return;
    // A "new" row the page already shows (it was created just before the page was drawn) replaces
    // that row instead of appearing twice.
    if (target.tagName === "TBODY") {
      var added = fragment.firstElementChild;
      var existing = added && added.tagName === "TR" && added.id ? document.getElementById(added.id) : null;
      if (existing) {
        existing.replaceWith(added);
        e.detail.shouldSwap = false;
        return;
      }
    }
    var fresh = fragment.querySelector ? fragment.querySelector("#" + CSS.escape(target.id)) : null;
    fresh = fresh || fragment.firstElementChild;
    if (!fresh) return;
    // The card being edited, unchanged by this push: leave it as it is.
    if (target.hasAttribute("data-keep") && target.dataset.version && target.dataset.version === fresh.dataset.version && editing(target)) {
      e.detail.shouldSwap = false;
      return;
    }
    Array.prototype.forEach.call(target.querySelectorAll("[data-keep][id]"), function (old) {
      var match = fragment.querySelector("#" + CSS.escape(old.id));
      if (!match || !editing(old)) return;
      if (old.dataset.version && old.dataset.version === match.dataset.version) {
        match.setAttribute("hx-preserve", "true"); // htmx keeps the element itself (and its focus)
      } else {
        carry(old, match);
      }
    });
    // A changed card keeps what was typed into it, and which of its sections a person opened or closed; a
    // form that can no longer be sent (the task closed) shows what was typed in its place, never drops it.
    if (editing(target)) {
      carry(target, fresh);
      Array.prototype.forEach.call(fresh.querySelectorAll("[data-kept]"), function (kept) {
        if (fields(kept).some(function (el) { return el.value; })) kept.hidden = false;
      });
    }
    var olds = target.matches("details[id]") ? [target] : [];
    Array.prototype.push.apply(olds, target.querySelectorAll("details[id]"));
    olds.forEach(function (old) {
      var match = old === target ? fresh : fragment.querySelector("#" + CSS.escape(old.id));
      if (match && match.tagName === "DETAILS") match.open = old.open;
    });
    var active = document.activeElement;
    if (active && target.contains(active) && active.name) {
      refocus = { key: key(active), start: active.selectionStart, end: active.selectionEnd };
    }
  });
  document.addEventListener("htmx:oobAfterSwap", function () {
    if (!refocus) return;
    var wanted = refocus;
    refocus = null;
    var candidates = document.querySelectorAll("input, textarea, select");
    for (var i = 0; i < candidates.length; i++) {
      if (candidates[i].name && key(candidates[i]) === wanted.key) {
        candidates[i].focus();
        try { candidates[i].setSelectionRange(wanted.start, wanted.end); } catch (err) { /* not a text field */ }
        break;
      }
    }
  });
})();

// Relative times ("3 minutes ago") stay true while a page is open: recomputed from `datetime` every second.
(function () {
  if (!window.Intl || !Intl.RelativeTimeFormat) return;
  var format = new Intl.RelativeTimeFormat("en", { numeric: "auto" });
  var units = [["year", 31536000], ["month", 2592000], ["day", 86400], ["hour", 3600], ["minute", 60], ["second", 1]];
  function relative(when) {
    var seconds = (when - Date.now()) / 1000;
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(seconds) >= units[i][1] || units[i][0] === "second") {
        return format.format(Math.round(seconds / units[i][1]), units[i][0]);
      }
    }
  }
  function tick() {
    Array.prototype.forEach.call(document.querySelectorAll("time[datetime][data-relative]"), function (el) {
      var when = Date.parse(el.getAttribute("datetime"));
      if (!isNaN(when)) el.textContent = relative(when);
    });
  }
  // Every second, and at once after a push, so a header's "2 seconds ago" moves on beside a card that ticks.
  setInterval(tick, 1000);
  document.addEventListener("htmx:oobAfterSwap", tick);
})();
