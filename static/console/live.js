// Live updates: the connection indicator, and a resync request on every (re)connect.
// The server re-renders cards from saved state; this file only reports where the page is.
(function () {
  var opens = 0, failures = 0;
  var words = { live: "Live", reconnecting: "Reconnecting…", offline: "Offline — retrying", stopped: "Live updates stopped" };
  function show(state) {
    var el = document.getElementById("live-indicator");
    if (!el) return;
    el.className = "live-indicator " + state;
    el.dataset.state = state;
    el.textContent = words[state];
  }
  function lastEvent() {
    var cursor = document.getElementById("live-cursor");
    return cursor ? parseInt(cursor.dataset.lastEvent || "0", 10) : 0;
  }
  if (window.htmx) {
    // Reconnect quickly after a restart, backing off to at most ~8 s, with jitter.
    htmx.config.wsReconnectDelay = function (n) {
      var ceiling = Math.min(500 * Math.pow(2, n), 8000);
      return ceiling / 2 + Math.random() * ceiling / 2;
    };
  }
  document.addEventListener("htmx:wsOpen", function (e) {
    opens += 1;
    failures = 0;
    show("live");
    e.detail.socketWrapper.send(JSON.stringify({ type: "resync", last_event: lastEvent(), reconnect: opens > 1 }), e.detail.elt);
  });
  document.addEventListener("htmx:wsClose", function (e) {
    var code = e.detail.event && e.detail.event.code;
    if (code === 4403 || code === 4401) { show("stopped"); return; }
    failures += 1;
    show(failures > 3 || navigator.onLine === false ? "offline" : "reconnecting");
  });
  window.addEventListener("offline", function () { show("offline"); });
})();
