// Live sections: every 2 s ask /console/live.json (with the page's filter) whether what the
// page shows changed; when it did, the answer carries the new sections and they are put in
// place (no reload; the filter form, outside them, keeps what is being typed).
(function () {
  const live = document.getElementById("live");
  if (!live) return;
  async function poll() {
    try {
      const query = new URLSearchParams(location.search);
      query.set("version", live.dataset.version);
      const r = await fetch("/console/live.json?" + query, {credentials: "same-origin"});
      if (r.ok) {
        const data = await r.json();
        if (data.html !== undefined && data.version !== live.dataset.version) {
          live.innerHTML = data.html;
          live.dataset.version = data.version;
        }
      }
    } catch (e) { /* the worker restarting: try again next tick */ }
    setTimeout(poll, 2000);
  }
  setTimeout(poll, 2000);
})();
