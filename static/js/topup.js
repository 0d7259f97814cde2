/* Console top-up: create the top-up through our API, confirm it with Stripe.js (card data goes
   straight to Stripe), then let htmx poll the status partial until the webhook has credited cash. */
(function () {
  "use strict";
  var gettext = window.gettext || function (text) { return text; };  // i18n: Django's JavaScript catalog (/jsi18n/)
  var form = document.getElementById("topup-form");
  if (!form) { return; }
  var errorBox = document.getElementById("topup-error");
  // The pay buttons stay disabled (as the page renders them) until the card field is mounted, so the form
  // can never be sent anywhere without Stripe.js.
  if (typeof window.Stripe !== "function") {
    errorBox.textContent = gettext("Payments are unavailable right now: the payment form could not be loaded. Try again later.");
    errorBox.hidden = false;
    return;
  }
  var stripe = window.Stripe(form.dataset.publishableKey);
  var elements = stripe.elements();
  var card = elements.create("card");
  card.mount("#card-element");
  Array.prototype.forEach.call(form.querySelectorAll("button[data-method]"), function (button) {
    button.disabled = false;
  });
  var busy = false;

  function showError(message) {
    errorBox.textContent = message;
    errorBox.hidden = !message;
  }

  function csrfToken() {
    var input = form.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function newKey() {
    if (window.crypto && window.crypto.randomUUID) { return window.crypto.randomUUID(); }
    return "topup-" + Date.now() + "-" + Math.random().toString(16).slice(2);
  }

  function createTopUp(amount, key) {
    return fetch(form.dataset.apiUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-CSRFToken": csrfToken(), "Idempotency-Key": key},
      body: JSON.stringify({amount: amount})
    }).then(function (response) {
      return response.json().then(function (body) {
        if (!response.ok) {
          var err = body && body.error ? body.error : {message: gettext("The top-up could not be created.")};
          var details = err.details && err.details.amount ? " " + err.details.amount.join(" ") : "";
          throw new Error(err.message + details);
        }
        return body;
      });
    });
  }

  // A script that declares a global `class Element` (localstripe's Stripe.js stand-in does) shadows
  // the DOM's Element for every script on the page and stops htmx from processing new content.
  function htmxCanProcess() {
    return typeof Element === "undefined" || Element === window.Element;
  }

  // The page's "Cash balance" card follows the status partial's, so the two never disagree on one page.
  function balanceFollows() {
    var fresh = document.getElementById("cash-balance");
    var card = document.getElementById("balance-now");
    if (fresh && card) { card.textContent = fresh.textContent; }
  }
  document.addEventListener("htmx:afterSettle", balanceFollows);

  // The same polling as the partial's hx-trigger, for pages where htmx cannot process it.
  function pollWithFetch(slot, url) {
    fetch(url, {credentials: "same-origin", headers: {"HX-Request": "true"}}).then(function (response) {
      return response.text();
    }).then(function (html) {
      slot.innerHTML = html;
      balanceFollows();
      var status = slot.querySelector("#topup-status");
      if (status && status.hasAttribute("hx-trigger")) { setTimeout(function () { pollWithFetch(slot, url); }, 2000); }
    }).catch(function () {
      setTimeout(function () { pollWithFetch(slot, url); }, 4000);
    });
  }

  function pollStatus(topupId) {
    var slot = document.getElementById("topup-status-slot");
    var url = form.dataset.statusUrl.replace("00000000-0000-0000-0000-000000000000", topupId);
    // The partial carries its own hx-trigger="every 2s" until the top-up settles.
    if (window.htmx && htmxCanProcess()) {
      window.htmx.ajax("GET", url, {target: slot, swap: "innerHTML"});
    } else {
      pollWithFetch(slot, url);
    }
  }

  function confirm(method, clientSecret) {
    if (method === "alipay") {
      return stripe.confirmAlipayPayment(clientSecret, {return_url: form.dataset.returnUrl});
    }
    if (method === "wechat_pay") {
      return stripe.confirmWechatPayPayment(clientSecret, {
        payment_method_options: {wechat_pay: {client: "web"}}
      });
    }
    return stripe.confirmCardPayment(clientSecret, {payment_method: {card: card}});
  }

  // One Idempotency-Key per amount the customer submits: a double click or a retry after a network
  // error reuses the same top-up and PaymentIntent.
  var pending = {amount: null, key: null};

  function pay(method) {
    if (busy) { return; }
    var amount = form.querySelector("#topup-amount").value.trim();
    if (!amount) { showError(gettext("Enter an amount.")); return; }
    if (pending.amount !== amount) { pending = {amount: amount, key: newKey()}; }
    busy = true;
    showError("");
    createTopUp(amount, pending.key).then(function (topup) {
      pollStatus(topup.id);
      if (!topup.client_secret) { return null; }
      return confirm(method, topup.client_secret).then(function (result) {
        if (result && result.error) { throw new Error(result.error.message || gettext("The payment failed.")); }
        pending = {amount: null, key: null};
      });
    }).catch(function (err) {
      showError(err.message);
    }).then(function () { busy = false; });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    pay("card");
  });
  Array.prototype.forEach.call(form.querySelectorAll("button[type=button][data-method]"), function (button) {
    button.addEventListener("click", function () { pay(button.dataset.method); });
  });
}());
