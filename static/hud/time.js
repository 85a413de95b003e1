// Every <time datetime> the `when` filter writes shows UTC; its title adds the reader's time.
(function () {
  "use strict";
  function localise() {
    document.querySelectorAll("time[datetime]").forEach(function (el) {
      var moment = new Date(el.getAttribute("datetime"));
      if (isNaN(moment.getTime()) || el.dataset.local === "true") { return; }
      // dateStyle/timeStyle cannot be combined with timeZoneName, so the fields are listed.
      el.title = el.title + " · your time: " + moment.toLocaleString(undefined, {
        year: "numeric", month: "short", day: "numeric",
        hour: "2-digit", minute: "2-digit", timeZoneName: "short"
      });
      el.dataset.local = "true";
    });
  }
  window.crcrHud = window.crcrHud || {};
  window.crcrHud.localise = localise;  // refresh.js localises swapped-in content
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", localise);
  } else {
    localise();
  }
})();
