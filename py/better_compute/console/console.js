// Better Compute console (docs/console.md): plain JavaScript, no build step, no library.
// Every datum comes from the HTTP API with the user's bearer token, so every read and change is one
// admission (one IAM decision, the tenant's rows only). The token lives in sessionStorage only.
// Text from the API is set with textContent, never parsed as HTML.
"use strict";

const API = "/api/compute/";
const STORE = window.sessionStorage;
const ZOOM_LEAD = 0.25;            // where "now" sits in a fresh window: a quarter from the left
const DEFAULT_BOOKING_SECONDS = 3600;
const EVENTS_SHOWN = 50;
const REFRESH_DELAY_MS = 500;      // events that come together refresh the view once
const RECONNECT_MAX_MS = 10000;
const TIMELINE_TICK_MS = 60000;     // the timeline is drawn again each minute: now moves

const state = {
  view: "fleet",
  clockOffsetMs: 0,                // the database's now minus the browser's (one clock: P9)
  fleet: [],                       // [{site, pools: [{pool, nodes}]}]
  timeline: { anchorMs: null, data: null },
  offerings: {},                   // pool_id -> [offering]
  cursor: null,                    // the event stream's Last-Event-ID
  stream: null,                    // AbortController of the open stream
  refreshTimer: null,
};

// -- small helpers -------------------------------------------------------------------------------

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "style") Object.assign(node.style, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function nowMs() { return Date.now() + state.clockOffsetMs; }
function iso(ms) { return new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z"); }
function shortTime(ms, spanSeconds) {
  const d = new Date(ms);
  const time = d.toISOString().slice(11, 16);
  return spanSeconds > 86400 ? d.toISOString().slice(5, 10) + " " + time : time;
}
function when(text) {  // an API time, to the second, in UTC; the exact value stays in the title
  return text ? new Date(Date.parse(text)).toISOString().replace("T", " ").replace(/\.\d{3}Z$/, "Z") : "";
}
function timeCell(text, name) { return el("td", { class: name, title: text || "", "data-value": text || "" }, when(text)); }
function age(seconds) {
  if (seconds === null || seconds === undefined) return "never";
  const s = Math.max(0, Math.round(seconds));
  if (s < 120) return s + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  if (s < 172800) return Math.round(s / 3600) + " h";
  return Math.round(s / 86400) + " d";
}
function newKey() {
  if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function showError(failure) {
  const box = $("error");
  if (!failure) { box.hidden = true; box.textContent = ""; return; }
  box.textContent = failure.code ? `${failure.code}: ${failure.message}` + (failure.hint ? ` (${failure.hint})` : "")
                                 : String(failure.message || failure);
  box.hidden = false;
}

// -- the API -------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(error) { super(error.message); this.code = error.code; this.hint = error.hint; }
}

function credentials() {
  const headers = { "Authorization": "Bearer " + (STORE.getItem("bc.token") || "") };
  const tenant = STORE.getItem("bc.tenant");
  if (tenant) headers["X-Tenant-Id"] = tenant;
  return headers;
}

async function call(method, input) {
  const response = await fetch(API + method.replace(".", "/"), {
    method: "POST",
    headers: { ...credentials(), "X-Better-Compute": "1", "Content-Type": "application/json" },
    body: JSON.stringify(input || {}),
  });
  let body;
  try { body = await response.json(); } catch (_) { throw new ApiError({ code: "UNAVAILABLE", message: `HTTP ${response.status}` }); }
  if (body.error) throw new ApiError(body.error);
  return body.data;
}

// -- sign in and views ---------------------------------------------------------------------------

async function signIn(event) {
  if (event) event.preventDefault();
  const token = $("token").value.trim() || STORE.getItem("bc.token");
  if (!token) { showError({ message: "Enter your bearer token." }); return; }
  STORE.setItem("bc.token", token);
  const tenant = $("tenant").value.trim();
  if (tenant) STORE.setItem("bc.tenant", tenant); else if (event) STORE.removeItem("bc.tenant");
  $("token").value = "";
  try {
    await loadFleet();
    showError(null);
  } catch (failure) {
    showError(failure);  // a refused credential (or no tenant) signs nobody in; anything else is shown and retried
    if (failure.code === "UNAUTHENTICATED" || failure.code === "ACCESS_DENIED" || failure.code === "INVALID_ARGUMENT") {
      STORE.removeItem("bc.token");
      $("error").textContent += " Check your token, or enter the tenant id you act in.";
      return;
    }
  }
  $("login").hidden = true;
  $("session").hidden = false;
  $("views").hidden = false;
  $("events-panel").hidden = false;
  $("who").textContent = STORE.getItem("bc.tenant") ? "tenant " + STORE.getItem("bc.tenant") : "signed in";
  show(state.view);
  startStream();
}

function signOut() {
  STORE.removeItem("bc.token");
  STORE.removeItem("bc.tenant");
  if (state.stream) state.stream.abort();
  window.location.reload();
}

function show(view) {
  state.view = view;
  for (const button of document.querySelectorAll("#views button")) button.classList.toggle("active", button.dataset.view === view);
  for (const section of document.querySelectorAll(".view")) section.hidden = section.id !== "view-" + view;
  refresh();
}

async function refresh() {
  try {
    if (state.view === "fleet") { await loadFleet(); renderFleet(); }
    else if (state.view === "timeline") { await ensurePools(); await loadTimeline(); }
    else if (state.view === "reservations") { await ensurePools(); await loadReservations(); }
    else if (state.view === "operator") { await loadFleet(); renderOperator(); }
  } catch (failure) {
    showError(failure);
  }
}

function refreshSoon() {  // at most one refresh per REFRESH_DELAY_MS, however many events come
  if (state.refreshTimer) return;
  state.refreshTimer = setTimeout(() => { state.refreshTimer = null; refresh(); }, REFRESH_DELAY_MS);
}

// -- fleet ---------------------------------------------------------------------------------------

async function loadFleet() {
  const sites = await call("sites.list", {});
  state.fleet = await Promise.all(sites.map(async (site) => {
    const pools = await call("pools.list", { site_id: site.site_id });
    return { site, pools: await Promise.all(pools.map(async (pool) => ({ pool, nodes: await call("nodes.list", { pool_id: pool.pool_id }) }))) };
  }));
  fillPoolSelects();
}

async function ensurePools() { if (!state.fleet.length) await loadFleet(); }

function allPools() { return state.fleet.flatMap((s) => s.pools); }
function allNodes() { return allPools().flatMap((p) => p.nodes.map((node) => ({ node, pool: p.pool }))); }
function poolName(poolId) { const p = allPools().find((x) => x.pool.pool_id === poolId); return p ? p.pool.name : poolId; }

function flagList(node) {
  return (node.flags || []).map((flag) => {
    const detail = (node.flag_details || {})[flag] || {};
    return el("span", { class: "flag", title: detail.reason ? `${detail.reason} (${detail.by || "?"})` : "" }, flag);
  });
}

function conditionList(node) {
  return (node.conditions || []).map((c) => el("div", { class: c.status === false || c.status === "False" || c.type === "DeviceMissing" ? "cond-bad" : "" },
    c.type + (c.status !== undefined ? "=" + c.status : "") + (c.reason ? ` (${c.reason})` : "") + (c.index !== undefined ? ` GPU ${c.index}` : "")));
}

function renderFleet() {
  const root = $("fleet");
  root.replaceChildren();
  if (!state.fleet.length) { root.append(el("p", { class: "note" }, "This tenant has no sites.")); return; }
  for (const { site, pools } of state.fleet) {
    const section = el("div", { class: "site", "data-site-id": site.site_id }, el("h3", {}, "Site " + site.name));
    for (const { pool, nodes } of pools) {
      const rows = nodes.map((node) => el("tr", { "data-node-id": node.node_id },
        el("td", {}, node.name),
        el("td", {}, `${(node.devices || []).length} × ` + [...new Set((node.devices || []).map((d) => d.model))].join(", "),
           el("div", { class: "note" }, (node.devices || []).map((d) => `${d.index}:${d.layout}`).join(" "))),
        el("td", {}, flagList(node), node.drain ? el("div", { class: "note" }, "drain: " + node.drain) : null),
        el("td", {}, conditionList(node)),
        el("td", {}, node.connected ? "connected" : "not connected", el("div", { class: "note" }, node.last_heard_seconds === null || node.last_heard_seconds === undefined
          ? "never heard" : "heard " + age(node.last_heard_seconds) + " ago")),
        el("td", {}, age((nowMs() - Date.parse(node.created_at)) / 1000))));
      section.append(el("div", { class: "pool", "data-pool-id": pool.pool_id },
        el("h4", {}, `Pool ${pool.name} · ${pool.gpu_model} · ${pool.placement_policy}`),
        nodes.length ? el("table", { class: "grid" },
          el("thead", {}, el("tr", {}, ["Node", "GPUs", "Flags", "Conditions", "Connected", "Age"].map((h) => el("th", {}, h)))),
          el("tbody", {}, rows)) : el("p", { class: "note" }, "No nodes yet.")));
    }
    root.append(section);
  }
}

function fillPoolSelects() {
  for (const id of ["tl-pool", "rf-pool"]) {
    const select = $(id);
    const keep = select.value;
    select.replaceChildren(...allPools().map(({ pool }) => el("option", { value: pool.pool_id }, pool.name)));
    if (keep && allPools().some((p) => p.pool.pool_id === keep)) select.value = keep;
  }
  const nodeSelect = $("tl-node");
  const keepNode = nodeSelect.value;
  const pool = allPools().find((p) => p.pool.pool_id === $("tl-pool").value);
  nodeSelect.replaceChildren(el("option", { value: "" }, "all nodes"),
    ...(pool ? pool.nodes : []).map((node) => el("option", { value: node.node_id }, node.name)));
  if (pool && pool.nodes.some((n) => n.node_id === keepNode)) nodeSelect.value = keepNode;
}

// -- timeline ------------------------------------------------------------------------------------

function spanSeconds() { return Number($("tl-zoom").value); }

function windowMs() {
  const span = spanSeconds() * 1000;
  const anchor = state.timeline.anchorMs === null ? nowMs() - span * ZOOM_LEAD : state.timeline.anchorMs;
  return [anchor, anchor + span];
}

async function loadTimeline() {
  const poolId = $("tl-pool").value;
  if (!poolId) { $("timeline").replaceChildren(el("p", { class: "note" }, "No pool to show.")); return; }
  const [start, end] = windowMs();
  const input = { pool_id: poolId, start: iso(start), end: iso(end) };
  if ($("tl-node").value) input.node_id = $("tl-node").value;
  const asked = Date.now();
  const data = await call("capacity.timeline", input);
  state.clockOffsetMs = Date.parse(data.now) - (asked + Date.now()) / 2;
  state.timeline.data = data;
  await loadOfferings(poolId);
  renderTimeline();
}

function atomLabel(atom) {
  if (atom.kind === "mig") return `${atom.profile} @${atom.placement}`;
  if (atom.kind === "slot") return `slot ${atom.slot}`;
  return "whole GPU";
}

function renderTimeline() {
  const data = state.timeline.data;
  const start = Date.parse(data.start);
  const end = Date.parse(data.end);
  const span = end - start;
  const now = Date.parse(data.now);
  const pct = (ms) => (100 * (Math.min(Math.max(ms, start), end) - start) / span) + "%";
  const bookingsByAtom = {};
  for (const booking of data.bookings) (bookingsByAtom[booking.atom_id] ||= []).push(booking);

  const root = $("timeline");
  root.replaceChildren();
  root.dataset.start = data.start;
  root.dataset.end = data.end;
  // The axis: a tick per step that gives about eight ticks.
  const steps = [300, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 345600, 604800].map((s) => s * 1000);
  const step = steps.find((s) => span / s <= 10) || steps[steps.length - 1];
  const axis = el("div", { class: "tl-track" });
  for (let t = Math.ceil(start / step) * step; t < end; t += step) {
    axis.append(el("span", { class: "tl-tick", style: { left: pct(t) } }, shortTime(t, span / 1000)));
  }
  root.append(el("div", { class: "tl-axis" }, el("div", { class: "tl-label" }, `${shortTime(start, 172801)} → ${shortTime(end, 172801)} UTC`), axis));

  const track = (attrs, bars) => el("div", { class: "tl-track", ...attrs },
    el("div", { class: "tl-past", style: { width: pct(now) } }), bars);
  for (const node of data.nodes) {
    root.append(el("div", { class: "tl-row node", "data-node-id": node.node_id },
      el("div", { class: "tl-label", title: node.name }, node.name, " ", flagList(node)), track({}, [])));
    for (const device of node.devices) {
      const whole = device.atoms.length === 1 && device.atoms[0].kind === "gpu";
      const label = `GPU ${device.index} · ${device.model}` + (whole ? "" : ` · ${device.layout}`);
      const rows = whole ? [[device.atoms[0], "device"]] : device.atoms.map((atom) => [atom, "atom"]);
      if (!whole) root.append(el("div", { class: "tl-row device parent", "data-device-uuid": device.uuid },
        el("div", { class: "tl-label", title: device.uuid }, label), track({}, [])));
      for (const [atom, kind] of rows) {
        const bars = (bookingsByAtom[atom.atom_id] || []).map((b) => bar(b, pct));
        root.append(el("div", { class: `tl-row ${kind}`, "data-atom-id": atom.atom_id, "data-shape": atom.shape },
          el("div", { class: "tl-label", title: kind === "device" ? device.uuid : atom.atom_id }, kind === "device" ? label : atomLabel(atom)),
          track({ onclick: (event) => freeGapClicked(event, atom, bookingsByAtom[atom.atom_id] || []) }, bars)));
      }
    }
  }
  root.append(el("div", { class: "tl-now", style: { left: `calc(16rem + (100% - 16rem) * ${(now - start) / span})` }, hidden: now < start || now > end }));
  $("tl-info").textContent = data.truncated ? "More bookings than one answer holds: zoom in to see them all." : "";
}

function bar(booking, pct) {
  const s = Date.parse(booking.start);
  const e = Date.parse(booking.end);
  const left = pct(s);
  const width = `calc(${pct(e)} - ${left})`;
  const when = `${booking.start} → ${booking.end}`;
  if (booking.busy) {
    return el("div", { class: "bar state-busy", style: { left, width }, title: "busy " + when, "data-busy": "true" }, "busy");
  }
  const readiness = booking.readiness ? ` · ${booking.readiness.state}` : "";
  return el("div", {
    class: `bar state-${booking.state}`, style: { left, width }, "data-reservation-id": booking.reservation_id,
    title: `${booking.shape} ${booking.reservation_id} (${booking.state}${readiness}) ${when}`,
    onclick: (event) => { event.stopPropagation(); show("reservations"); showReservation(booking.reservation_id); },
  }, `${booking.shape} ${booking.reservation_id.slice(0, 8)}`);
}

function freeGapClicked(event, atom, bookings) {
  const rect = event.currentTarget.getBoundingClientRect();
  const data = state.timeline.data;
  const start = Date.parse(data.start);
  const span = Date.parse(data.end) - start;
  const now = nowMs();
  const clicked = Math.max(start + span * (event.clientX - rect.left) / rect.width, now);
  const live = bookings.map((b) => [Date.parse(b.start), Date.parse(b.end)]);  // a released one ended before now
  if (live.some(([s, e]) => s <= clicked && clicked < e)) return;  // not a free stretch
  const gapEnd = Math.min(...live.map(([s]) => s).filter((s) => s > clicked), Infinity);
  const startNow = clicked - now < 60000;
  const from = startNow ? now : Math.floor(clicked / 60000) * 60000;
  const until = Math.min(from + DEFAULT_BOOKING_SECONDS * 1000, gapEnd);
  $("rf-pool").value = data.pool_id;
  fillShapes(data.pool_id, atom.shape);
  $("rf-count").value = "1";
  $("rf-start").value = startNow ? "" : iso(from);
  $("rf-end").value = iso(Math.floor(until / 1000) * 1000);
  $("rf-result").textContent = `Filled in from the timeline: ${atom.shape}, ${startNow ? "now" : iso(from)} → ${iso(until)}.`;
}

// -- reserve -------------------------------------------------------------------------------------

async function loadOfferings(poolId) {
  if (!state.offerings[poolId]) state.offerings[poolId] = await call("offerings.list", { pool_id: poolId });
  if ($("rf-pool").value === poolId || !$("rf-shape").options.length) fillShapes(poolId, $("rf-shape").value);
}

function fillShapes(poolId, wanted) {
  const shapes = (state.offerings[poolId] || []).filter((o) => (o.instance_kind || "devices") === "devices").map((o) => o.shape);
  if (wanted && !shapes.includes(wanted)) shapes.push(wanted);
  $("rf-shape").replaceChildren(...shapes.map((shape) => el("option", { value: shape }, shape)));
  if (wanted) $("rf-shape").value = wanted;
}

function reserveInput() {
  const input = { pool_id: $("rf-pool").value, shape: $("rf-shape").value, count: Number($("rf-count").value) };
  if ($("rf-start").value.trim()) input.start = $("rf-start").value.trim();
  if ($("rf-end").value.trim()) input.end = $("rf-end").value.trim();
  return input;
}

async function earliest() {
  const input = reserveInput();
  const from = input.start ? Date.parse(input.start) : nowMs();
  const duration = input.end ? Math.round((Date.parse(input.end) - from) / 1000) : DEFAULT_BOOKING_SECONDS;
  const query = { pool_id: input.pool_id, shape: input.shape, count: input.count, duration_seconds: Math.max(duration, 1) };
  if (input.start) query.not_before = input.start;
  try {
    const found = await call("capacity.earliest", query);
    if (found.start) {
      $("rf-start").value = found.start;
      $("rf-end").value = found.end;
      $("rf-result").textContent = `Earliest: ${found.start} → ${found.end}.`;
    } else {
      $("rf-result").textContent = "No window: " + (found.reason || "none found");
    }
  } catch (failure) { $("rf-result").textContent = `${failure.code}: ${failure.message}`; }
}

async function reserve(event) {
  event.preventDefault();
  const input = { ...reserveInput(), idempotency_key: newKey() };
  try {
    const reservation = await call("reservations.create", input);
    $("rf-result").textContent = `Reserved ${reservation.reservation_id} (${reservation.state}): ${when(reservation.start)} → ${when(reservation.end)}.`;
    $("rf-result").dataset.reservationId = reservation.reservation_id;
    await refresh();
  } catch (failure) {
    $("rf-result").textContent = `${failure.code}: ${failure.message}` + (failure.hint ? ` (${failure.hint})` : "");
  }
}

// -- reservations --------------------------------------------------------------------------------

async function loadReservations() {
  const reservations = await call("reservations.list", {});
  const body = $("reservations").tBodies[0];
  body.replaceChildren(...reservations.map((r) => el("tr", { "data-reservation-id": r.reservation_id },
    el("td", { class: "id" }, r.reservation_id),
    el("td", {}, poolName(r.pool_id)),
    el("td", {}, `${r.count} × ${r.shape}`),
    el("td", {}, r.phase),
    el("td", {}, r.state),
    timeCell(r.start, "start"),
    timeCell(r.end, "end"),
    el("td", {}, r.readiness ? r.readiness.state + (r.readiness.reason ? ` (${r.readiness.reason})` : "") : ""),
    el("td", {},
      el("button", { type: "button", onclick: () => showReservation(r.reservation_id) }, "Details"),
      r.phase !== "ended" ? el("button", { type: "button", class: "extend", onclick: () => extend(r) }, "Extend 1 h") : null,
      r.phase !== "ended" ? el("button", { type: "button", class: "release", onclick: () => release(r) }, "Release") : null))));
}

async function showReservation(reservationId) {
  try {
    const r = await call("reservations.get", { reservation_id: reservationId });
    $("reservation-detail").replaceChildren(
      el("h3", {}, "Reservation ", el("span", { class: "id" }, r.reservation_id)),
      el("p", {}, `${r.count} × ${r.shape} in ${poolName(r.pool_id)}, ${r.phase} (${r.state}), ${when(r.start)} → ${when(r.end)}; readiness: `
        + (r.readiness ? r.readiness.state + (r.readiness.reason ? ` (${r.readiness.reason})` : "") : "?")),
      el("table", { class: "grid" },
        el("thead", {}, el("tr", {}, ["Node", "Device", "Atom", "CDI name", "State", "Readiness"].map((h) => el("th", {}, h)))),
        el("tbody", {}, r.bookings.map((b) => el("tr", {},
          el("td", {}, b.node), el("td", { class: "id" }, b.device_uuid),
          el("td", {}, b.kind === "mig" ? `${b.profile} @${b.placement}` : b.kind === "slot" ? `slot ${b.slot}` : "whole GPU"),
          el("td", { class: "id" }, b.cdi_name), el("td", {}, b.state),
          el("td", {}, b.readiness ? b.readiness.state + (b.readiness.reason ? ` (${b.readiness.reason})` : "") : ""))))));
  } catch (failure) { showError(failure); }
}

async function extend(r) {
  try {
    await call("reservations.extend", { reservation_id: r.reservation_id, end: iso(Date.parse(r.end) + 3600000), expected_end: r.end,
                                        idempotency_key: newKey() });
    showError(null);
    await refresh();
  } catch (failure) { showError(failure); }
}

async function release(r) {
  try {
    await call("reservations.release", { reservation_id: r.reservation_id, idempotency_key: newKey() });
    showError(null);
    await refresh();
  } catch (failure) { showError(failure); }
}

// -- operator ------------------------------------------------------------------------------------

function renderOperator() {
  const select = $("op-node");
  const keep = select.value;
  select.replaceChildren(...allNodes().map(({ node, pool }) => el("option", { value: node.node_id }, `${node.name} (${pool.name})`)));
  if (keep) select.value = keep;
  $("operator-nodes").tBodies[0].replaceChildren(...allNodes().map(({ node, pool }) => el("tr", { "data-node-id": node.node_id },
    el("td", {}, node.name), el("td", {}, pool.name), el("td", {}, flagList(node)),
    el("td", {}, Object.entries(node.flag_details || {}).map(([flag, d]) => el("div", {}, `${flag}: ${d.reason || ""} (${d.by || "?"})`))),
    el("td", {}, node.drain || ""),
    el("td", {}, node.connected ? "yes" : "no"))));
}

async function operate(event) {
  event.preventDefault();
  const action = $("op-action").value;
  const input = { node_id: $("op-node").value, idempotency_key: newKey() };
  if ($("op-reason").value.trim()) input.reason = $("op-reason").value.trim();
  try {
    await call("nodes." + action, input);
    $("op-result").textContent = `${action}: done.`;
    await refresh();
  } catch (failure) {
    $("op-result").textContent = `${failure.code}: ${failure.message}` + (failure.hint ? ` (${failure.hint})` : "");
  }
}

// -- live: the event stream (SSE over fetch, so that it carries the bearer token) ------------------

async function startStream() {
  let delay = 500;
  while (STORE.getItem("bc.token")) {
    const controller = new AbortController();
    state.stream = controller;
    try {
      const headers = credentials();
      if (state.cursor) headers["Last-Event-ID"] = state.cursor;
      const response = await fetch(API + "watch", { headers, signal: controller.signal });
      if (!response.ok) {
        const body = await response.json().catch(() => ({}));
        throw new ApiError(body.error || { code: "UNAVAILABLE", message: `HTTP ${response.status}` });
      }
      setLive(true);
      delay = 500;
      await readEvents(response.body.getReader());
    } catch (failure) {
      if (controller.signal.aborted) return;
      if (failure.code === "ACCESS_DENIED" || failure.code === "UNAUTHENTICATED") { setLive(false, failure.code); return; }
    }
    setLive(false, "reconnecting");
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, RECONNECT_MAX_MS);
  }
}

async function readEvents(reader) {
  const decoder = new TextDecoder();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffered += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const message = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      let id = null;
      let data = "";
      for (const line of message.split("\n")) {
        if (line.startsWith("id: ")) id = line.slice(4);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (!data) continue;  // a heartbeat
      if (id) state.cursor = id;
      eventArrived(JSON.parse(data));
    }
  }
}

function eventArrived(event) {
  const list = $("events");
  list.prepend(el("li", { "data-type": event.type }, `${event.type} ${event.aggregate_type} `, el("span", { class: "id" }, event.aggregate_id)));
  while (list.children.length > EVENTS_SHOWN) list.lastChild.remove();
  refreshSoon();
}

function setLive(on, why) {
  const badge = $("live");
  badge.classList.toggle("on", on);
  badge.classList.toggle("off", !on);
  badge.textContent = on ? "live" : (why || "offline");
}

// -- wiring --------------------------------------------------------------------------------------

function pan(direction) {
  const [start] = windowMs();
  state.timeline.anchorMs = start + direction * spanSeconds() * 1000 / 2;
  refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", signOut);
  for (const button of document.querySelectorAll("#views button")) button.addEventListener("click", () => show(button.dataset.view));
  $("tl-pool").addEventListener("change", () => { fillPoolSelects(); $("rf-pool").value = $("tl-pool").value; refresh(); });
  $("tl-node").addEventListener("change", refresh);
  $("tl-zoom").addEventListener("change", () => { state.timeline.anchorMs = null; refresh(); });
  $("tl-earlier").addEventListener("click", () => pan(-1));
  $("tl-later").addEventListener("click", () => pan(1));
  $("tl-now").addEventListener("click", () => { state.timeline.anchorMs = null; refresh(); });
  $("rf-pool").addEventListener("change", async () => { await loadOfferings($("rf-pool").value).catch(showError); fillShapes($("rf-pool").value); });
  $("rf-earliest").addEventListener("click", earliest);
  $("reserve-form").addEventListener("submit", reserve);
  $("operator-form").addEventListener("submit", operate);
  setInterval(() => { if (state.view === "timeline" && !document.hidden && !$("views").hidden) refresh(); }, TIMELINE_TICK_MS);
  if (STORE.getItem("bc.token")) signIn(null);
});
