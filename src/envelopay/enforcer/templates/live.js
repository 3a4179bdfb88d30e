// Live queue: every 2 s ask /console/live.json for the queue's version; when it changed,
// put the new rows in place (no page reload, nothing typed is lost).
(function () {
  const table = document.getElementById("queue");
  if (!table) return;
  async function poll() {
    try {
      const r = await fetch("/console/live.json" + location.search, {credentials: "same-origin"});
      if (r.ok) {
        const data = await r.json();
        if (data.version !== table.dataset.version) {
          table.innerHTML = data.html;
          table.dataset.version = data.version;
        }
      }
    } catch (e) { /* the enforcer restarting: try again next tick */ }
    setTimeout(poll, 2000);
  }
  setTimeout(poll, 2000);
})();
