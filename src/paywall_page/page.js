// Pays the offer on this page with an EIP-1193 browser wallet: an EIP-3009
// TransferWithAuthorization signed with eth_signTypedData_v4, sent back as PAYMENT-SIGNATURE.
// When the offer carries a sign-in-with-x challenge on an EVM chain, a buyer who paid before
// signs its EIP-4361 message with personal_sign instead, sent back as SIGN-IN-WITH-X.
(function () {
  "use strict";
  var data = document.getElementById("x402-challenge");
  var button = document.getElementById("pay");
  var signIn = document.getElementById("sign-in");
  var signInButton = document.getElementById("sign-in-button");
  var status = document.getElementById("status");
  var result = document.getElementById("result");
  if (!data || !button || !status || !result) return;
  var challenge = JSON.parse(data.textContent);
  // Sign-in refusals a person can act on; any other code is shown as the server wrote it.
  var REFUSALS = {
    invalid_siwx_not_entitled: "This wallet has not bought this yet. Pay below, or sign in with the wallet that paid.",
    invalid_siwx_entitlement_lapsed: "This wallet's purchase is too old to sign in with. Pay to get it again.",
    invalid_siwx_signature: "The wallet's signature did not match its account. Try again, or pay.",
    invalid_siwx_expired: "The sign-in request expired before it was signed. Sign in again.",
    invalid_siwx_issued_at_too_old: "The sign-in request expired before it was signed. Sign in again.",
    invalid_siwx_nonce_used: "This sign-in was used already. Sign in again."
  };

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

  // The first EVM chain the sign-in challenge supports, or null when there is none.
  function signInChain(extension) {
    if (!extension || !extension.info || !Array.isArray(extension.supportedChains)) return null;
    return extension.supportedChains.filter(function (chain) {
      return chain && /^eip155:\d+$/.test(chain.chainId);
    })[0] || null;
  }

  // The EIP-4361 message of the proof's fields, line for line as the server rebuilds it.
  function siweMessage(proof) {
    var lines = [
      proof.domain + " wants you to sign in with your Ethereum account:",
      proof.address,
      ""
    ];
    if (proof.statement) lines.push(proof.statement);
    lines.push("");
    lines.push("URI: " + proof.uri, "Version: " + proof.version,
      "Chain ID: " + proof.chainId.split(":")[1], "Nonce: " + proof.nonce,
      "Issued At: " + proof.issuedAt);
    if (proof.expirationTime) lines.push("Expiration Time: " + proof.expirationTime);
    if (proof.notBefore) lines.push("Not Before: " + proof.notBefore);
    if (proof.requestId) lines.push("Request ID: " + proof.requestId);
    if (Array.isArray(proof.resources) && proof.resources.length) {
      lines.push("Resources:");
      proof.resources.forEach(function (resource) { lines.push("- " + resource); });
    }
    return lines.join("\n");
  }

  // The proof's fields: the challenge's info, the account, the chain and its signature type.
  function proofFields(extension, chain, address) {
    var proof = {};
    ["domain", "uri", "version", "nonce", "issuedAt", "expirationTime", "notBefore",
      "requestId", "statement", "resources"].forEach(function (key) {
      if (extension.info[key] !== undefined && extension.info[key] !== null) {
        proof[key] = extension.info[key];
      }
    });
    proof.address = address;
    proof.chainId = chain.chainId;
    proof.type = chain.type;
    return proof;
  }

  // The same GET with `headers`; the JSON (or text) body and whether it was a 2xx.
  async function repeat(headers) {
    headers.Accept = "application/json";
    var response = await fetch(location.href, { headers: headers, cache: "no-store" });
    var text = await response.text();
    var body;
    try { body = JSON.parse(text); } catch (e) { body = text; }
    return { ok: response.ok, status: response.status, body: body, text: text };
  }

  // Links for every object in the answer with a `url` (named by its `name`), and the Passport.
  function show(body, title) {
    result.textContent = "";
    var heading = document.createElement("h2");
    heading.textContent = title;
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
      var answer = await repeat({ "PAYMENT-SIGNATURE": base64(JSON.stringify(payment)) });
      if (!answer.ok) {
        var reason = answer.body && answer.body.error ? answer.body.error : answer.text;
        throw new Error("the store answered " + answer.status + ": " + reason);
      }
      say("Payment settled.", "done");
      show(answer.body, "Paid");
    } catch (error) {
      say("Not paid: " + (error && error.message ? error.message : String(error)), "error");
    } finally {
      button.disabled = false;
    }
  }

  async function signInWithWallet() {
    var wallet = window.ethereum;
    if (!wallet || typeof wallet.request !== "function") {
      say("No browser wallet found. Install one, or use the other ways to pay below.", "error");
      return;
    }
    signInButton.disabled = true;
    try {
      say("Asking the wallet for an account…");
      var accounts = await wallet.request({ method: "eth_requestAccounts" });
      var address = accounts && accounts[0];
      if (!address) throw new Error("the wallet shared no account");
      // A challenge is answered once and expires within minutes: ask for a fresh one, and use
      // the page's own only when the store does not give one.
      say("Asking the store for a sign-in challenge…");
      var fresh = await repeat({});
      var extension = fresh.body && fresh.body.extensions && fresh.body.extensions["sign-in-with-x"];
      if (!signInChain(extension)) extension = challenge.extensions["sign-in-with-x"];
      var chain = signInChain(extension);
      var proof = proofFields(extension, chain, address);
      say("Sign the sign-in message in your wallet…");
      var message = hex(new TextEncoder().encode(siweMessage(proof)));
      proof.signature = await wallet.request({ method: "personal_sign", params: [message, address] });
      say("Signing in…");
      var answer = await repeat({ "SIGN-IN-WITH-X": base64(JSON.stringify(proof)) });
      if (answer.ok) {
        say("Signed in: here is what this wallet bought.", "done");
        show(answer.body, "Already yours");
        return;
      }
      var error = answer.body && typeof answer.body.error === "string" ? answer.body.error : "";
      var code = error.split(":")[0];
      var refusal = REFUSALS[code] ||
        "Not signed in: the store answered " + answer.status + (error ? ": " + error : "");
      say(refusal, "error");
    } catch (error) {
      say("Not signed in: " + (error && error.message ? error.message : String(error)), "error");
    } finally {
      signInButton.disabled = false;
    }
  }

  button.addEventListener("click", pay);
  button.hidden = false;
  if (signIn && signInButton && challenge.extensions &&
      signInChain(challenge.extensions["sign-in-with-x"])) {
    signInButton.addEventListener("click", signInWithWallet);
    signIn.hidden = false;
  }
})();
