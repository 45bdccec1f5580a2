// Filters the storefront's product cards by tag and text; without this script every card shows.
(function () {
  "use strict";
  var form = document.getElementById("filter");
  if (!form) return;
  var tag = document.getElementById("filter-tag");
  var text = document.getElementById("filter-text");
  var count = document.getElementById("count");
  var cards = Array.prototype.slice.call(document.querySelectorAll("li.card"));
  var sections = Array.prototype.slice.call(document.querySelectorAll("section.tag"));
  function apply() {
    var wanted = tag.value;
    var words = text.value.toLowerCase().trim().split(/\s+/).filter(Boolean);
    var shown = 0;
    cards.forEach(function (card) {
      var haystack = card.getAttribute("data-search") || "";
      var match = (!wanted || card.getAttribute("data-tag") === wanted) &&
        words.every(function (w) { return haystack.indexOf(w) !== -1; });
      card.hidden = !match;
      if (match) shown++;
    });
    sections.forEach(function (section) {
      section.hidden = !section.querySelector("li.card:not([hidden])");
    });
    count.textContent = shown + " of " + cards.length + " products";
  }
  form.addEventListener("submit", function (e) { e.preventDefault(); apply(); });
  tag.addEventListener("change", apply);
  text.addEventListener("input", apply);
  form.hidden = false;
  apply();
})();
