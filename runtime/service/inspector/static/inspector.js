// actorloop inspector: live updates for a session page. Progressive enhancement only: every
// page is complete server-rendered HTML without this file. On a session page it follows the
// session's Server-Sent Events (GET /v1/sessions/{id}/events), lists each event as it
// arrives, and re-fetches the server-rendered summary and timeline after it. A running
// turn's, step's or call's duration ticks once a second between events (the server renders
// "running since HH:MM:SS"; this counts on from the server's clock, not the browser's).
(function () {
  "use strict";

  var live = document.getElementById("live");
  if (!live || !window.EventSource || !window.fetch) {
    return;
  }
  var panel = document.getElementById("live-log");
  var list = document.getElementById("live-events");
  var state = document.getElementById("live-state");
  var MAX_ROWS = 200;
  var lastSeq = Number(live.dataset.lastSeq);
  var chunks = 0;
  var fetching = false;
  var again = false;
  var clockOffset = 0; // the server's clock minus this browser's, as of the last rendering
  var TICK_MS = 1000;

  panel.hidden = false;

  function say(text) {
    state.textContent = text;
  }

  function formatDuration(ms) {
    var seconds = Math.max(0, ms) / 1000;
    if (seconds < 1) {
      return Math.round(seconds * 1000) + " ms";
    }
    if (seconds < 120) {
      return seconds.toFixed(1) + " s";
    }
    return (seconds / 60).toFixed(1) + " min";
  }

  function syncClock() {
    var rendered = live.querySelector("[data-rendered-at]");
    if (rendered) {
      clockOffset = Number(rendered.dataset.renderedAt) - Date.now();
    }
  }

  // Count every running duration on from its start, by the server's clock.
  function tick() {
    var now = Date.now() + clockOffset;
    live.querySelectorAll(".ticking[data-since]").forEach(function (element) {
      var text = element.querySelector(".ticking-text");
      if (!text) {
        return;
      }
      text.textContent = element.dataset.label + " " +
        formatDuration(now - Number(element.dataset.since)) +
        " (since " + element.dataset.clock + ")";
      element.dataset.ticks = String(Number(element.dataset.ticks || "0") + 1);
    });
  }

  function describe(type, data) {
    var body = data && data.data ? data.data : {};
    if (type === "turn/start") {
      return "turn " + body.turn + " started";
    }
    if (type === "turn/end") {
      return "turn " + body.turn + " ended " + (body.reason ? body.reason.kind : "");
    }
    if (type === "step/start" || type === "step/end") {
      return "turn " + body.turn + " step " + body.step;
    }
    if (type === "tool/call") {
      return body.name + " " + body.call_id;
    }
    if (type === "tool/result") {
      return body.call_id + (body.is_error ? " (error)" : "");
    }
    if (type === "assistant/message") {
      return "answer from " + body.model;
    }
    return "";
  }

  function addRow(seq, type, data) {
    var row = document.createElement("li");
    row.dataset.seq = String(seq);
    row.dataset.type = type;
    var detail = describe(type, data);
    row.textContent = "seq " + seq + " · " + type + (detail ? " · " + detail : "");
    list.appendChild(row);
    while (list.children.length > MAX_ROWS) {
      list.removeChild(list.firstElementChild);
    }
    list.scrollTop = list.scrollHeight;
  }

  // Replace the summary and timeline with the server's current rendering; one fetch at a
  // time, and one more after it if events arrived meanwhile.
  function refresh() {
    if (fetching) {
      again = true;
      return;
    }
    fetching = true;
    again = false;
    var openDetails = live.querySelectorAll("details[open]").length > 0;
    fetch(live.dataset.fragment, { cache: "no-store", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("the timeline answered " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        // Keep keyboard focus where it was: the same link in the new rendering.
        var focused = live.contains(document.activeElement) ? document.activeElement : null;
        var href = focused ? focused.getAttribute("href") : null;
        live.innerHTML = html;
        if (href) {
          var same = live.querySelector('[href="' + CSS.escape(href) + '"]');
          if (same) {
            same.focus();
          }
        }
        if (openDetails) {
          live.querySelectorAll("details.inherited").forEach(function (d) { d.open = true; });
        }
        var summary = live.querySelector("[data-last-seq]");
        if (summary) {
          live.dataset.renderedSeq = summary.dataset.lastSeq;
        }
        syncClock();
        tick();
      })
      .catch(function (error) {
        say("Could not refresh the timeline: " + error.message);
      })
      .then(function () {
        fetching = false;
        if (again) {
          refresh();
        }
      });
  }

  function onEvent(message) {
    var seq = Number(message.lastEventId);
    if (!(seq > lastSeq)) {
      return; // already shown (a reconnect resumes after Last-Event-ID)
    }
    lastSeq = seq;
    live.dataset.lastSeq = String(seq);
    if (message.type === "assistant/chunk") {
      chunks += 1;
      say("Following live: streaming (" + chunks + " chunks).");
    } else {
      var data = null;
      try {
        data = JSON.parse(message.data);
      } catch (ignored) {
        data = null;
      }
      addRow(seq, message.type, data);
      if (message.type === "step/start") {
        chunks = 0;
      }
      if (message.type === "turn/end") {
        say("Following live: turn ended; waiting for the next one.");
      }
    }
    refresh();
  }

  syncClock();
  tick();
  window.setInterval(tick, TICK_MS);

  var url = live.dataset.events + "?after=" + encodeURIComponent(String(lastSeq));
  var source = new EventSource(url);
  live.dataset.eventTypes.split(" ").forEach(function (type) {
    source.addEventListener(type, onEvent);
  });
  source.addEventListener("open", function () {
    live.dataset.following = "true";
    say("Following the session's events live.");
  });
  source.addEventListener("error", function () {
    live.dataset.following = "false";
    say(source.readyState === EventSource.CLOSED
      ? "The event stream ended; reload the page to follow again."
      : "Reconnecting to the event stream…");
  });
})();
