// Ages that keep counting: `<time data-ago>` (the |ago filter) is advanced every second,
// so "last heartbeat 4 s ago" grows on the page without a push (a heartbeat is not an event).
(function () {
  function text(s) {
    s = Math.max(0, Math.floor(s));
    if (s < 120) return s + " s ago";
    if (s < 7200) return Math.floor(s / 60) + " min ago";
    if (s < 172800) return Math.floor(s / 3600) + " h ago";
    return Math.floor(s / 86400) + " days ago";
  }
  setInterval(function () {
    var now = Date.now();
    document.querySelectorAll("time[data-ago]").forEach(function (el) {
      var t = Date.parse(el.getAttribute("datetime"));
      if (!isNaN(t)) el.textContent = text((now - t) / 1000);
    });
  }, 1000);
})();
