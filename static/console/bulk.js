// Choosing tasks on the board for a bulk action: how many are chosen, "select every task on this page",
// and only the fields the chosen action uses. The server decides everything else: the preview freezes
// exactly what was chosen, and nothing happens before it is confirmed.
(function () {
  function bulkForm() { return document.getElementById("bulk-form"); }
  function boxes() {
    return Array.prototype.slice.call(document.querySelectorAll('input[name="ids"][form="bulk-form"]'));
  }
  function update() {
    var form = bulkForm();
    if (!form) return;
    var all = form.querySelector('input[name="all_matching"]');
    var chosen = boxes().filter(function (b) { return b.checked; }).length;
    var out = document.getElementById("bulk-selected");
    if (out) {
      if (all && all.checked) out.textContent = all.dataset.words;
      else if (chosen) out.textContent = chosen + (chosen === 1 ? " task chosen" : " tasks chosen") + " on this page.";
      else out.textContent = "Choose tasks below, or every task that matches.";
    }
    var page = document.getElementById("select-page");
    if (page) page.checked = chosen > 0 && chosen === boxes().length;
    var action = form.querySelector('select[name="action"]');
    Array.prototype.forEach.call(form.querySelectorAll("[data-for]"), function (el) {
      el.hidden = action ? el.dataset.for.split(" ").indexOf(action.value) < 0 : false;
    });
  }
  document.addEventListener("change", function (e) {
    if (e.target && e.target.id === "select-page") {
      boxes().forEach(function (b) { b.checked = e.target.checked; });
    }
    update();
  });
  // Pushed rows keep what was chosen (live.js carries checked boxes over); the count follows.
  document.addEventListener("htmx:oobAfterSwap", update);
  // The bar is folded on a phone, so the first tasks are in the first screen; a wide screen has room for it open.
  var fold = document.querySelector("#bulk-form details.bulk-fold");
  if (fold && window.matchMedia && window.matchMedia("(min-width: 861px)").matches) fold.open = true;
  update();
})();
