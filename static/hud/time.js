// Every <time datetime> the `when` filter writes shows UTC; its title adds the reader's time.
(function () {
  "use strict";
  function localise() {
    document.querySelectorAll("time[datetime]").forEach(function (el) {
      var moment = new Date(el.getAttribute("datetime"));
      if (isNaN(moment.getTime())) { return; }
      el.title = el.title + " · your time: " + moment.toLocaleString(undefined, {
        dateStyle: "medium", timeStyle: "short", timeZoneName: "short"
      });
      el.dataset.local = "true";
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", localise);
  } else {
    localise();
  }
})();
