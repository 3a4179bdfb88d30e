// Live queue: every 2 s ask /console/live.json whether the queue's version changed; when
// it did, the answer carries the new rows and they are put in place (no page reload).
(function () {
  const table = document.getElementById("queue");
  if (!table) return;
  async function poll() {
    try {
      const query = new URLSearchParams(location.search);
      query.set("version", table.dataset.version);
      const r = await fetch("/console/live.json?" + query, {credentials: "same-origin"});
      if (r.ok) {
        const data = await r.json();
        if (data.html !== undefined && data.version !== table.dataset.version) {
          table.innerHTML = data.html;
          table.dataset.version = data.version;
        }
      }
    } catch (e) { /* the enforcer restarting: try again next tick */ }
    setTimeout(poll, 2000);
  }
  setTimeout(poll, 2000);
})();
