// Pays the offer on this page with an EIP-1193 browser wallet: an EIP-3009
// TransferWithAuthorization signed with eth_signTypedData_v4, sent back as PAYMENT-SIGNATURE.
(function () {
  "use strict";
  var data = document.getElementById("x402-challenge");
  var button = document.getElementById("pay");
  var status = document.getElementById("status");
  var result = document.getElementById("result");
  if (!data || !button || !status || !result) return;
  var challenge = JSON.parse(data.textContent);

  function say(text, kind) {
    status.textContent = text;
    status.className = kind || "";
  }

  function payable(accept) {
    return accept.scheme === "exact" && /^eip155:\d+$/.test(accept.network) &&
      accept.extra && accept.extra.name && accept.extra.version;
  }

  function hex(bytes) {
    var out = "0x";
    for (var i = 0; i < bytes.length; i++) out += ("0" + bytes[i].toString(16)).slice(-2);
    return out;
  }

  function base64(text) {
    var bytes = new TextEncoder().encode(text);
    var binary = "";
    for (var i = 0; i < bytes.length; i++) binary += String.fromCharCode(bytes[i]);
    return btoa(binary);
  }

  function safeHref(url) {
    try {
      var parsed = new URL(url, location.href);
      return parsed.protocol === "https:" || parsed.protocol === "http:" ? parsed.href : null;
    } catch (e) {
      return null;
    }
  }

  function typedData(accept, from) {
    var chainId = Number(accept.network.split(":")[1]);
    var now = Math.floor(Date.now() / 1000);
    var nonce = new Uint8Array(32);
    crypto.getRandomValues(nonce);
    var message = {
      from: from,
      to: accept.payTo,
      value: String(accept.amount),
      validAfter: String(now - 600),
      validBefore: String(now + Number(accept.maxTimeoutSeconds)),
      nonce: hex(nonce)
    };
    return {
      types: {
        EIP712Domain: [
          { name: "name", type: "string" }, { name: "version", type: "string" },
          { name: "chainId", type: "uint256" }, { name: "verifyingContract", type: "address" }
        ],
        TransferWithAuthorization: [
          { name: "from", type: "address" }, { name: "to", type: "address" },
          { name: "value", type: "uint256" }, { name: "validAfter", type: "uint256" },
          { name: "validBefore", type: "uint256" }, { name: "nonce", type: "bytes32" }
        ]
      },
      primaryType: "TransferWithAuthorization",
      domain: {
        name: accept.extra.name, version: accept.extra.version,
        chainId: chainId, verifyingContract: accept.asset
      },
      message: message
    };
  }

  // Links for every object in the answer with a `url` (named by its `name`), and the Passport.
  function show(body) {
    result.textContent = "";
    var heading = document.createElement("h2");
    heading.textContent = "Paid";
    result.appendChild(heading);
    if (body && body.passport && typeof body.passport.passport === "string") {
      var passport = document.createElement("p");
      passport.id = "passport";
      passport.textContent = "Passport: " + body.passport.passport;
      result.appendChild(passport);
    }
    var list = document.createElement("ul");
    (function walk(value) {
      if (Array.isArray(value)) { value.forEach(walk); return; }
      if (!value || typeof value !== "object") return;
      var href = typeof value.url === "string" ? safeHref(value.url) : null;
      if (href) {
        var item = document.createElement("li");
        var link = document.createElement("a");
        link.href = href;
        link.className = "download";
        link.textContent = typeof value.name === "string" ? value.name : href;
        item.appendChild(link);
        list.appendChild(item);
      }
      Object.keys(value).forEach(function (key) { walk(value[key]); });
    })(body);
    if (list.children.length) result.appendChild(list);
    var raw = document.createElement("pre");
    raw.textContent = JSON.stringify(body, null, 2);
    result.appendChild(raw);
  }

  async function pay() {
    var wallet = window.ethereum;
    if (!wallet || typeof wallet.request !== "function") {
      say("No browser wallet found. Install one, or use the other ways to pay below.", "error");
      return;
    }
    var accept = (challenge.accepts || []).filter(payable)[0];
    if (!accept) {
      say("None of this offer's payment options can be signed by a browser wallet.", "error");
      return;
    }
    button.disabled = true;
    try {
      say("Asking the wallet for an account…");
      var accounts = await wallet.request({ method: "eth_requestAccounts" });
      var from = accounts && accounts[0];
      if (!from) throw new Error("the wallet shared no account");
      var chainHex = "0x" + Number(accept.network.split(":")[1]).toString(16);
      say("Switching the wallet to the offer's network…");
      await wallet.request({ method: "wallet_switchEthereumChain", params: [{ chainId: chainHex }] });
      say("Sign the payment in your wallet…");
      var typed = typedData(accept, from);
      var signature = await wallet.request({
        method: "eth_signTypedData_v4",
        params: [from, JSON.stringify(typed)]
      });
      var payment = {
        x402Version: 2,
        resource: challenge.resource,
        accepted: accept,
        payload: { signature: signature, authorization: typed.message }
      };
      if (challenge.extensions) payment.extensions = challenge.extensions;
      say("Sending the payment…");
      var response = await fetch(location.href, {
        headers: { "PAYMENT-SIGNATURE": base64(JSON.stringify(payment)), "Accept": "application/json" },
        cache: "no-store"
      });
      var text = await response.text();
      var body;
      try { body = JSON.parse(text); } catch (e) { body = text; }
      if (!response.ok) {
        var reason = body && body.error ? body.error : text;
        throw new Error("the store answered " + response.status + ": " + reason);
      }
      say("Payment settled.", "done");
      show(body);
    } catch (error) {
      say("Not paid: " + (error && error.message ? error.message : String(error)), "error");
    } finally {
      button.disabled = false;
    }
  }

  button.addEventListener("click", pay);
  button.hidden = false;
})();
