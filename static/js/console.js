/* Cardmix console: copy buttons (event delegation, so they keep working after htmx swaps). */
/* i18n: gettext from Django's JavaScript catalog (/jsi18n/, loaded first by base.html); English without it. */
var gettext = window.gettext || function (text) { return text; };
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-copy]");
  if (!button) return;
  var source = document.querySelector(button.getAttribute("data-copy"));
  if (!source) return;
  var text = source.textContent.trim();
  var done = function () {
    var label = button.textContent;
    button.textContent = gettext("Copied");
    setTimeout(function () { button.textContent = label; }, 1500);
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done, function () { fallback(text); done(); });
  } else { fallback(text); done(); }
  function fallback(value) {
    var area = document.createElement("textarea");
    area.value = value; area.setAttribute("readonly", ""); area.style.position = "absolute"; area.style.left = "-9999px";
    document.body.appendChild(area); area.select();
    try { document.execCommand("copy"); } catch (e) { /* the text stays selectable */ }
    document.body.removeChild(area);
  }
});

/* Live polling swaps the whole #instance-live block: keep what the user opened or chose but did not save
   (elements marked data-keep: <details> stay open, an edited <select> keeps its choice). */
(function () {
  var kept = null;
  document.addEventListener("htmx:beforeSwap", function (event) {
    kept = {open: {}, value: {}};
    event.detail.target.querySelectorAll("[data-keep]").forEach(function (el) {
      var key = el.getAttribute("data-keep");
      if (el.tagName === "DETAILS") kept.open[key] = el.open;
      else if (el.tagName === "SELECT") {
        var chosen = el.options[el.selectedIndex];
        if (chosen && !chosen.defaultSelected) kept.value[key] = el.value;
      }
    });
  });
  document.addEventListener("htmx:afterSettle", function () {
    if (!kept) return;
    var state = kept;
    kept = null;
    document.querySelectorAll("[data-keep]").forEach(function (el) {
      var key = el.getAttribute("data-keep");
      if (el.tagName === "DETAILS" && key in state.open) el.open = state.open[key];
      else if (el.tagName === "SELECT" && key in state.value) el.value = state.value[key];
    });
  });
})();

/* The create form's live quote: htmx sends nothing while a field is invalid (a count of 0, -3 or over the maximum),
   which left the previous mix's price on screen as if it were the typed one. Say what to fix instead. */
document.addEventListener("htmx:validation:halted", function (event) {
  var form = event.target;
  var quote = document.getElementById("quote");
  if (!form || form.id !== "create-form" || !quote) return;
  // A control, not the <fieldset> around it (a fieldset matches :invalid too, and has no label or message).
  var field = form.querySelector("input:invalid, select:invalid, textarea:invalid");
  var label = field && field.id ? form.querySelector("label[for='" + field.id + "']") : null;
  var heading = document.createElement("h2");
  heading.textContent = gettext("Price");
  var note = document.createElement("p");
  note.className = "muted";
  note.id = "quote-error";
  note.textContent = (label ? label.textContent.trim() + ": " : "") +
    (field ? field.validationMessage : gettext("Complete the card mix")) + " " + gettext("Fix it to see a price.");
  quote.replaceChildren(heading, note);
});
