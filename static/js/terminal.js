// The instance page's web terminal: xterm.js over a WebSocket to the instance's shell (console/consumers/terminal.py).
// Binary frames are keystrokes and output; a text frame {"resize": [cols, rows]} follows the panel's size.
// A dropped connection reconnects with backoff; close codes 4000 (instance stopped) and 4001 (sshd not answering),
// or a first connection that never opened (refused), do not.
(function () {
  "use strict";
  const STOPPED = 4000, UNREACHABLE = 4001;
  const gettext = window.gettext || ((text) => text);  // i18n: Django's JavaScript catalog (/jsi18n/)

  // xterm.js writes its theme and cell sizes into <style> elements it creates; the page's CSP lets only those
  // carrying this response's nonce apply, so each one made from now on gets it (markup stays without inline style).
  const nonceMeta = document.querySelector('meta[name="csp-style-nonce"]');
  if (nonceMeta) {
    const create = document.createElement.bind(document);
    document.createElement = function (tag, options) {
      const el = create(tag, options);
      if (String(tag).toLowerCase() === "style") el.nonce = nonceMeta.content;
      return el;
    };
  }

  function start(panel) {
    const term = new window.Terminal({ cursorBlink: true, convertEol: false, fontSize: 14, scrollback: 5000 });
    const fit = new window.FitAddon.FitAddon();
    term.loadAddon(fit);
    term.open(panel.querySelector(".terminal-screen"));
    fit.fit();
    const status = panel.querySelector(".terminal-status");
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + panel.dataset.ws;
    const encoder = new TextEncoder();
    let socket = null, delay = 500, everOpened = false;

    function say(text) { status.textContent = text; }
    function sendResize() {
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ resize: [term.cols, term.rows] }));
    }
    function connect() {
      say(gettext("Connecting…"));
      socket = new WebSocket(url);
      socket.binaryType = "arraybuffer";
      socket.onopen = () => { everOpened = true; delay = 500; say(gettext("Connected")); panel.dataset.connected = "1"; sendResize(); term.focus(); };
      socket.onmessage = (ev) => term.write(typeof ev.data === "string" ? ev.data : new Uint8Array(ev.data));
      socket.onclose = (ev) => {
        panel.dataset.connected = "";
        if (ev.code === STOPPED) { say(gettext("The instance stopped: terminal closed.")); return; }
        if (ev.code === UNREACHABLE) { say(gettext("The instance's shell does not answer.")); return; }
        if (!everOpened) { say(gettext("The terminal is not available.")); return; }
        say(gettext("Connection lost: reconnecting…"));  // a network blip: a new shell once the socket is back
        setTimeout(connect, delay);
        delay = Math.min(delay * 2, 10000);
      };
    }
    term.onData((data) => { if (socket && socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(data)); });
    term.onResize(sendResize);
    // Copy: the selection goes to the clipboard as it is made (paste is the browser's own, Ctrl+Shift+V / Cmd+V).
    term.onSelectionChange(() => {
      const text = term.getSelection();
      if (text && navigator.clipboard) navigator.clipboard.writeText(text).catch(() => {});
    });
    window.addEventListener("resize", () => fit.fit());
    connect();
  }

  document.addEventListener("click", (ev) => {
    const button = ev.target.closest("[data-terminal-open]");
    if (!button) return;
    const panel = document.getElementById(button.dataset.terminalOpen);
    if (!panel || panel.dataset.started) return;
    panel.dataset.started = "1";
    panel.hidden = false;
    button.hidden = true;
    start(panel);
  });
})();
