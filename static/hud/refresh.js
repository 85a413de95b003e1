// Auto-refresh of pages whose <main> has data-refresh-seconds (summary, backend, PR pages).
// Every interval it fetches the same URL and, only when the main content changed, swaps it in
// place: no reload, scroll kept, unchanged charts kept as drawn, open <details> kept open.
// A fetched page whose scripts are not the ones this page runs (a deploy changed them: their
// names carry their content's hash) is loaded whole instead, so its content is drawn by its
// own code. A checkbox in the top bar turns it off; the choice is remembered in localStorage.
(function () {
  "use strict";
  var KEY = "crcr-hud:auto-refresh";
  var main = document.getElementById("main");
  var toggle = document.getElementById("auto-refresh");
  if (!main || !toggle || !main.dataset.refreshSeconds) { return; }
  var seconds = Math.max(5, parseInt(main.dataset.refreshSeconds, 10) || 60);
  // The main content as served (this script runs right after </main>, before time.js and the
  // charts change it): a fetched page is swapped in only when it differs.
  var last = comparable(main.innerHTML);
  var served = null;  // read at the first check: the scripts after this one are not parsed yet
  var timer = null;
  var busy = false;

  function stored() {
    try { return window.localStorage.getItem(KEY) !== "off"; } catch (e) { return true; }
  }
  function remember(on) {
    try { window.localStorage.setItem(KEY, on ? "on" : "off"); } catch (e) { /* private mode */ }
  }
  function status(text) {
    toggle.parentElement.title = text;
  }
  function interacting() {
    var active = document.activeElement;
    if (active && main.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) {
      return true;
    }
    var selection = window.getSelection && window.getSelection();
    return Boolean(selection && String(selection).length);
  }
  function scripts(doc) {
    return Array.prototype.map.call(doc.querySelectorAll("script[src]"), function (el) {
      return el.getAttribute("src");
    }).join(" ");
  }
  function comparable(html) {
    // Machine times carry seconds (a window ending "now"); what a reader sees is to the minute.
    return html.replace(/(datetime="[^"]*?T\d\d:\d\d)[^"]*"/g, '$1"');
  }
  function detailsKey(el, index) {
    var summary = el.querySelector("summary");
    return (el.id || "") + "|" + (summary ? summary.textContent.trim() : "") + "|" + index;
  }
  function swap(fresh) {
    // Charts whose figure JSON did not change keep their drawn element (no redraw flash).
    main.querySelectorAll("[data-figure]").forEach(function (old) {
      var id = old.dataset.figure;
      var target = fresh.querySelector('[data-figure="' + CSS.escape(id) + '"]');
      var before = document.getElementById(id);
      var after = fresh.querySelector("#" + CSS.escape(id));
      if (target && before && after && before.textContent === after.textContent) {
        target.replaceWith(old);
      }
    });
    var open = {};
    main.querySelectorAll("details").forEach(function (el, i) { open[detailsKey(el, i)] = el.open; });
    fresh.querySelectorAll("details").forEach(function (el, i) {
      var key = detailsKey(el, i);
      if (key in open) { el.open = open[key]; }
    });
    var x = window.scrollX, y = window.scrollY;
    main.replaceChildren.apply(main, Array.prototype.slice.call(fresh.childNodes));
    window.scrollTo(x, y);
    if (window.crcrHud.localise) { window.crcrHud.localise(); }
    if (window.crcrHud.drawCharts) { window.crcrHud.drawCharts(); }
    document.documentElement.dataset.refreshes =
      String(parseInt(document.documentElement.dataset.refreshes || "0", 10) + 1);
  }
  function refresh() {
    if (busy) { return Promise.resolve(false); }
    busy = true;
    if (served === null) { served = scripts(document); }
    return fetch(window.location.href, { cache: "no-store", credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("main");
        if (!fresh) { return false; }
        if (scripts(doc) !== served) {
          window.location.reload();
          return true;
        }
        var signature = comparable(fresh.innerHTML);
        if (signature === last) { return false; }
        last = signature;
        swap(fresh);
        return true;
      })
      .then(function (changed) {
        status("Auto-refresh every " + seconds + " s; last checked " + new Date().toLocaleTimeString());
        return changed;
      })
      .catch(function (error) {
        status("Auto-refresh: the last check failed (" + error.message + "); retrying");
        return false;
      })
      .finally(function () { busy = false; });
  }
  function tick() {
    if (document.hidden || interacting()) { return; }
    refresh();
  }
  function apply(on) {
    if (timer) { window.clearInterval(timer); timer = null; }
    if (on) { timer = window.setInterval(tick, seconds * 1000); }
    status(on ? "Auto-refresh every " + seconds + " s (no reload)" : "Auto-refresh is off");
  }
  window.crcrHud = window.crcrHud || {};
  window.crcrHud.refreshNow = refresh;
  window.crcrHud.autoRefreshOn = function () { return timer !== null; };
  toggle.checked = stored();
  toggle.parentElement.hidden = false;
  toggle.addEventListener("change", function () {
    remember(toggle.checked);
    apply(toggle.checked);
  });
  apply(toggle.checked);
})();
