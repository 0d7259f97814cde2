// The instance page's web terminal: xterm.js over a WebSocket to the instance's shell (console/consumers/terminal.py).
// Binary frames are keystrokes and output; a text frame {"resize": [cols, rows]} follows the panel's size, and the
// server's text frame {"session": id, "reattached": bool} names the shell. A dropped connection reconnects with
// backoff and that id, so the server gives the same shell back (and what it printed meanwhile) while it keeps it.
// Close codes 4000 (instance stopped), 4001 (sshd not answering), 4003 (taken over by another window), 4004 (the
// instance's host key changed), or a first connection that never opened (refused), do not reconnect.
(function () {
  "use strict";
  const STOPPED = 4000, UNREACHABLE = 4001, TAKEN_OVER = 4003, HOST_KEY = 4004;
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
    let socket = null, delay = 500, everOpened = false, shellId = "", reconnects = 0;

    function say(text) { status.textContent = text; }
    function sendResize() {
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ resize: [term.cols, term.rows] }));
    }
    function connect() {
      say(gettext("Connecting…"));
      socket = new WebSocket(url + (shellId ? "?session=" + encodeURIComponent(shellId) : ""));
      socket.binaryType = "arraybuffer";
      socket.onopen = () => { everOpened = true; delay = 500; sendResize(); term.focus(); };
      socket.onmessage = (ev) => {
        if (typeof ev.data !== "string") { term.write(new Uint8Array(ev.data)); return; }
        let notice = null;
        try { notice = JSON.parse(ev.data); } catch (e) { return; }
        if (!notice || !notice.session) return;
        const fresh = reconnects > 0 && !notice.reattached;
        shellId = notice.session;
        panel.dataset.shell = notice.reattached ? "reattached" : "new";
        panel.dataset.reconnects = String(reconnects);
        panel.dataset.connected = "1";
        say(reconnects === 0 ? gettext("Connected") : (fresh ? gettext("Reconnected: a new shell (the previous one had ended)")
                                                    : gettext("Reconnected to the same shell")));
      };
      socket.onclose = (ev) => {
        panel.dataset.connected = "";
        if (ev.code === STOPPED) { say(gettext("The instance stopped: terminal closed.")); return; }
        if (ev.code === UNREACHABLE) { say(gettext("The instance's shell does not answer.")); return; }
        if (ev.code === TAKEN_OVER) { say(gettext("This shell was opened in another window.")); return; }
        if (ev.code === HOST_KEY) { say(gettext("The instance's SSH host key changed: refused (see the terminal).")); return; }
        if (!everOpened) { say(gettext("The terminal is not available.")); return; }
        say(gettext("Connection lost: reconnecting in %s s…").replace("%s", String(Math.round(delay / 100) / 10)));
        reconnects += 1;
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
