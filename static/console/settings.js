// Tool settings: mark a choice that differs from the saved setting as unsaved, before it is sent.
document.addEventListener("change", (event) => {
  const input = event.target;
  if (!input.matches || !input.matches(".profile [data-saved]")) return;
  const value = input.type === "checkbox" ? (input.checked ? "1" : "0") : input.value;
  const dirty = value !== input.dataset.saved;
  const holder = input.closest("tr") || input.closest(".switch-line");
  if (holder) {
    holder.classList.toggle("is-dirty", dirty);
    const note = holder.querySelector(".unsaved");
    if (note) note.hidden = !dirty;
  }
  const section = input.closest(".profile");
  if (section) section.classList.toggle("has-unsaved", section.querySelector(".is-dirty") !== null);
});
