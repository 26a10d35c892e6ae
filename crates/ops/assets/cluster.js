// The overview's cluster panel (issue 27): this node among the nodes sharing its storage,
// from the HTTP API's GET /v1/cluster (docs/postgres.md): its role, the epoch, the leader,
// the live nodes and this node's lag. On the file log: a single node.
"use strict";

function clusterHtml(c) {
  if (c.node == null) {
    return `<div class="cards" id="cluster"><div class="card"><span class="muted">cluster</span><b data-cluster="single">single node, file log</b></div></div>`;
  }
  const card = (k, v, key) => `<div class="card"><span class="muted">${k}</span><b data-cluster="${key}">${v}</b></div>`;
  const nodes = (c.nodes || [])
    .map((n) => `<tr data-node="${esc(n.node)}"><td>${n.node === c.leader ? "★" : ""}</td><td>${esc(n.node)}${
      n.node === c.node ? ' <span class="muted">(this node)</span>' : ""}</td><td>${esc(n.role)}</td></tr>`)
    .join("");
  return `<div id="cluster"><div class="cards">${card("this node", esc(c.node), "node")}${card("role", esc(c.role), "role")}
    ${card("epoch", num(c.epoch), "epoch")}${card("leader", esc(c.leader), "leader")}${card("lag", num(c.lag_ms) + " ms", "lag")}</div>
    <table id="cluster-nodes"><tr><th>leader</th><th>node</th><th>role</th></tr>${nodes ||
      '<tr><td colspan="3" class="muted">no heartbeats seen yet</td></tr>'}</table></div>`;
}

// Fills the overview's #overview-cluster; a failure leaves a note rather than breaking the page.
async function drawCluster() {
  const box = $("#overview-cluster");
  if (!box) return;
  try {
    const res = await fetch(location.origin + "/v1/cluster", { credentials: "same-origin" });
    if (!res.ok) throw new Error(res.status + " " + res.statusText);
    box.innerHTML = "<h2>Cluster</h2>" + clusterHtml(await res.json());
  } catch (e) {
    box.innerHTML = `<h2>Cluster</h2><p class="muted">${esc(e.message)}</p>`;
  }
}
