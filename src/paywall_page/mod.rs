//! [`PaywallPage`]: the HTML 402 a person sees when a browser opens a priced URL.
//!
//! Opt-in with [`X402Layer::paywall_page`](crate::X402Layer::paywall_page). When a request
//! without payment prefers `text/html` to JSON (a browser navigation), the 402 keeps its
//! `PAYMENT-REQUIRED` header and `Cache-Control: no-store`, and its body is a small
//! self-contained page: what is sold, the price, the network, and the ways to pay — a browser
//! wallet (EIP-1193, `eth_signTypedData_v4` of an EIP-3009 authorization, then the same `GET`
//! with `PAYMENT-SIGNATURE`), a hosted checkout when one is configured, and the request an agent
//! makes. When the 402 carries a sign-in-with-x challenge (the
//! `tower-x402-siwx` crate's hook) on an EVM chain, a buyer who paid before signs in instead: the wallet signs the
//! challenge's EIP-4361 message (`personal_sign`) and the page repeats the `GET` with
//! `SIGN-IN-WITH-X`. [`PaywallPage::product_name`] titles the page by the product's name, with
//! the description below it. The page's script and stylesheet are allowed by hash in the `Content-Security-Policy`
//! it is sent with; nothing else may run or load. Every other client gets the JSON 402.
//!
//! # Example
//!
//! ```
//! use axum::{Router, body::Body, routing::get};
//! use tower::ServiceExt;
//! use tower_x402::PaywallPage;
//! use tower_x402::proto::{ResourceInfo, UsdcDeployment};
//! use tower_x402::{HttpFacilitator, Offer, X402Layer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
//!     .usdc(&UsdcDeployment::BASE, "0.10".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
//!     .build()?;
//! let paywall = X402Layer::new(HttpFacilitator::new("https://x402.org/facilitator")?, std::sync::Arc::new(offer))
//!     .paywall_page(PaywallPage::new());
//! let app = Router::new().route("/report", get(|| async { "the report" }).layer(paywall));
//!
//! let navigation = http::Request::get("/report")
//!     .header("accept", "text/html,application/xhtml+xml,*/*;q=0.8")
//!     .body(Body::empty())?;
//! let response = app.oneshot(navigation).await?;
//! assert_eq!(response.status(), 402);
//! assert_eq!(response.headers()["content-type"], "text/html; charset=utf-8");
//! # Ok(())
//! # }
//! ```

use std::fmt::{self, Write as _};
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use sha2::{Digest as _, Sha256};
use x402_wire::{AtomicAmount, PAYMENT_REQUIRED, UsdAmount, UsdcDeployment};

use crate::pricing::Offer;

mod accept;

pub(crate) use accept::prefers_html;

const SCRIPT: &str = include_str!("page.js");
const STYLE: &str = include_str!("page.css");

/// Builds a hosted checkout URL for an offer, or `None` when it has none.
type CheckoutLink = dyn Fn(&Offer) -> Option<String> + Send + Sync;

/// Names the product an offer sells, or `None` to title the page by its description.
type ProductName = dyn Fn(&Offer) -> Option<String> + Send + Sync;

/// The settings of the HTML paywall page; see the [module docs](self).
#[derive(Clone, Default)]
#[must_use]
pub struct PaywallPage {
    title: Option<String>,
    checkout: Option<Arc<CheckoutLink>>,
    product_name: Option<Arc<ProductName>>,
}

impl PaywallPage {
    /// A page titled by each offer's resource description, without a hosted checkout.
    pub fn new() -> Self {
        Self::default()
    }

    /// The site name shown above the product (e.g. the store's name).
    pub fn site_name(mut self, name: impl Into<String>) -> Self {
        self.title = Some(name.into());
        self
    }

    /// Links each offer to a hosted checkout page: `link` returns its URL, or `None`.
    ///
    /// ```
    /// use tower_x402::PaywallPage;
    /// let page = PaywallPage::new()
    ///     .checkout(|offer| Some(format!("https://pay.example/?for={}", offer.resource().url)));
    /// # drop(page);
    /// ```
    pub fn checkout(
        mut self,
        link: impl Fn(&Offer) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.checkout = Some(Arc::new(link));
        self
    }

    /// Names the product each offer sells: `name` returns it, or `None`. The name is the page's
    /// `<title>` and heading, with the offer's description below it; without a name the
    /// description (or the resource URL) is the title and heading.
    ///
    /// ```
    /// use tower_x402::PaywallPage;
    /// let page = PaywallPage::new().product_name(|offer| {
    ///     offer.resource().url.ends_with("/report").then(|| "Quarterly report".to_owned())
    /// });
    /// # drop(page);
    /// ```
    pub fn product_name(
        mut self,
        name: impl Fn(&Offer) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.product_name = Some(Arc::new(name));
        self
    }

    /// The 402 for `offer` as this page.
    pub(crate) fn challenge(&self, offer: &Offer) -> Response<Bytes> {
        let mut response = Response::new(Bytes::from(self.render(offer)));
        *response.status_mut() = StatusCode::PAYMENT_REQUIRED;
        let headers = response.headers_mut();
        headers.insert(PAYMENT_REQUIRED, offer.challenge_header().clone());
        set_page_headers(headers);
        response
    }

    fn render(&self, offer: &Offer) -> String {
        let resource = offer.resource();
        let description = resource.description.as_deref().filter(|d| !d.is_empty());
        let product = self
            .product_name
            .as_ref()
            .and_then(|name| name(offer))
            .filter(|name| !name.is_empty());
        let name = product.as_deref().or(description).unwrap_or(&resource.url);
        let mut html = String::with_capacity(16 * 1024);
        html.push_str("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
        html.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
        html.push_str("<meta name=\"robots\" content=\"noindex\">");
        let _ = write!(html, "<title>Payment required — {}</title>", Escaped(name));
        let _ = write!(html, "<style>{STYLE}</style></head><body><main>");
        if let Some(site) = &self.title {
            let _ = write!(html, "<p class=\"kicker\">{}</p>", Escaped(site));
        }
        let _ = write!(html, "<h1>{}</h1>", Escaped(name));
        if let Some(description) = description.filter(|_| product.is_some()) {
            let _ = write!(html, "<p class=\"lede\">{}</p>", Escaped(description));
        }
        let _ = write!(
            html,
            "<p class=\"kicker\">402 Payment required for <code>{}</code></p>",
            Escaped(&resource.url)
        );
        self.render_offer(&mut html, offer);
        html.push_str(
            "<section class=\"card\" aria-labelledby=\"wallet-heading\">\
             <h2 id=\"wallet-heading\">Pay with a browser wallet</h2>\
             <p>Your wallet signs a USDC transfer authorization for exactly this price; \
             the page then repeats the request with the signed payment.</p>\
             <button id=\"pay\" type=\"button\" hidden>Pay</button>\
             <noscript><p>Paying with a browser wallet needs JavaScript.</p></noscript>\
             <div id=\"sign-in\" hidden><p>Bought it before? Signing a message with the \
             wallet that paid gets it again, without paying.</p>\
             <button id=\"sign-in-button\" type=\"button\" class=\"secondary\">\
             Already bought? Sign in with your wallet</button></div>\
             <p id=\"status\" role=\"status\" aria-live=\"polite\"></p>\
             <div id=\"result\"></div></section>",
        );
        if let Some(link) = self.checkout.as_ref().and_then(|link| link(offer)) {
            let _ = write!(
                html,
                "<section class=\"card\" aria-labelledby=\"checkout-heading\">\
                 <h2 id=\"checkout-heading\">Hosted checkout</h2>\
                 <p><a class=\"checkout\" href=\"{}\" rel=\"noopener noreferrer\">Pay on the \
                 hosted checkout page</a></p></section>",
                Escaped(&link)
            );
        }
        let _ = write!(
            html,
            "<section class=\"card\" aria-labelledby=\"agent-heading\">\
             <h2 id=\"agent-heading\">For agents</h2>\
             <p>Request the URL; the <code>PAYMENT-REQUIRED</code> header of the 402 holds the \
             offer (base64 JSON, x402 version 2). Sign one of its <code>accepts</code> and repeat \
             the request with the payment:</p>\
             <pre>GET {url}\nAccept: application/json\nPAYMENT-SIGNATURE: &lt;base64 PaymentPayload&gt;</pre>\
             </section>",
            url = Escaped(&resource.url)
        );
        html.push_str("<script type=\"application/json\" id=\"x402-challenge\">");
        push_json_for_script(&mut html, offer.challenge_body());
        let _ = writeln!(
            html,
            "</script><script>{SCRIPT}</script></main></body></html>"
        );
        html
    }

    fn render_offer(&self, html: &mut String, offer: &Offer) {
        html.push_str("<section class=\"card\" aria-labelledby=\"price-heading\">");
        html.push_str("<h2 id=\"price-heading\">Price</h2>");
        for (index, accept) in offer.accepts().iter().enumerate() {
            let usdc = UsdcDeployment::for_network(&accept.network)
                .filter(|usdc| usdc.asset.eq_ignore_ascii_case(&accept.asset));
            let (price, unit) = match usdc
                .and_then(|usdc| UsdAmount::from_atomic(accept.amount, usdc.decimals).ok())
            {
                Some(usd) => (format!("${usd}"), format!("{usd} USDC")),
                None => (accept.amount.to_string(), "atomic units".to_owned()),
            };
            if index == 0 {
                let _ = write!(
                    html,
                    "<p class=\"price\">{} <small>{}</small></p>",
                    Escaped(&price),
                    Escaped(&unit)
                );
            }
            let _ = write!(
                html,
                "<dl><dt>Network</dt><dd>{} (<code>{}</code>)</dd>\
                 <dt>Asset</dt><dd><code>{}</code></dd><dt>Pay to</dt><dd><code>{}</code></dd>\
                 <dt>Amount</dt><dd>{} atomic units</dd></dl>",
                Escaped(network_name(accept.network.as_str())),
                Escaped(accept.network.as_str()),
                Escaped(&accept.asset),
                Escaped(&accept.pay_to),
                atomic(accept.amount),
            );
        }
        html.push_str("</section>");
    }
}

fn atomic(amount: AtomicAmount) -> String {
    amount.to_string()
}

fn network_name(id: &str) -> &str {
    match id {
        "eip155:8453" => "Base",
        "eip155:84532" => "Base Sepolia (testnet)",
        "eip155:137" => "Polygon",
        "eip155:42161" => "Arbitrum One",
        id if id.starts_with("solana:") => "Solana",
        id if id.starts_with("algorand:") => "Algorand",
        id => id,
    }
}

impl fmt::Debug for PaywallPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PaywallPage")
            .field("site_name", &self.title)
            .field("checkout", &self.checkout.is_some())
            .field("product_name", &self.product_name.is_some())
            .finish()
    }
}

/// Content type, no caching, the strict CSP with the page's own script and style hashes, and
/// `Vary: Accept` (the same URL answers JSON to other clients).
fn set_page_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CONTENT_SECURITY_POLICY, content_security_policy());
}

/// `default-src 'none'`, the page's script and style by hash, fetches to its own origin only.
pub(crate) fn content_security_policy() -> HeaderValue {
    static POLICY: OnceLock<HeaderValue> = OnceLock::new();
    POLICY
        .get_or_init(|| {
            let policy = format!(
                "default-src 'none'; script-src '{}'; style-src '{}'; connect-src 'self'; \
                 base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
                sha256_source(SCRIPT),
                sha256_source(STYLE)
            );
            HeaderValue::try_from(policy).unwrap_or(HeaderValue::from_static("default-src 'none'"))
        })
        .clone()
}

fn sha256_source(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// JSON placed inside `<script type="application/json">`: `<`, `>` and `&` as `\u` escapes, so
/// no text in it can close the element (they only occur inside JSON strings).
fn push_json_for_script(html: &mut String, json: &[u8]) {
    for ch in String::from_utf8_lossy(json).chars() {
        match ch {
            '<' => html.push_str("\\u003c"),
            '>' => html.push_str("\\u003e"),
            '&' => html.push_str("\\u0026"),
            '\u{2028}' => html.push_str("\\u2028"),
            '\u{2029}' => html.push_str("\\u2029"),
            ch => html.push(ch),
        }
    }
}

/// Text escaped for HTML content and double-quoted attributes.
struct Escaped<'a>(&'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for ch in self.0.chars() {
            match ch {
                '&' => f.write_str("&amp;")?,
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&#39;")?,
                ch => f.write_char(ch)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use x402_wire::ResourceInfo;

    fn offer(description: &str) -> Offer {
        let mut resource = ResourceInfo::new("https://shop.example/item");
        resource.description = Some(description.to_owned());
        Offer::builder(resource)
            .usdc(
                &UsdcDeployment::BASE_SEPOLIA,
                "0.25".parse().unwrap(),
                "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            )
            .build()
            .unwrap()
    }

    #[test]
    fn hostile_text_is_escaped_everywhere() {
        let hostile = "</script><script>alert(1)</script><b onclick=\"x\">";
        let html = PaywallPage::new()
            .checkout(|_| Some("https://pay.example/?a=\"><script>x</script>".into()))
            .render(&offer(hostile));
        assert_eq!(html.matches("<script").count(), 2, "{html}");
        assert!(!html.contains("<b onclick"));
        assert!(html.contains("&lt;/script&gt;&lt;script&gt;alert(1)"));
        assert!(html.contains("\\u003c/script\\u003e"));
        assert!(!html.contains("href=\"https://pay.example/?a=\">"));
    }

    #[test]
    fn shows_price_network_and_size_limit() {
        let html = PaywallPage::new().render(&offer("A report"));
        assert!(html.contains("$0.25"));
        assert!(html.contains("0.25 USDC"));
        assert!(html.contains("Base Sepolia"));
        assert!(html.len() < 30 * 1024, "{} bytes", html.len());
        let handlers = html.match_indices(" on").filter(|(at, _)| {
            let rest = &html[at + 3..];
            let name_len = rest.bytes().take_while(u8::is_ascii_lowercase).count();
            name_len > 0 && rest[name_len..].starts_with('=')
        });
        assert_eq!(handlers.count(), 0, "no inline event handlers");
    }

    #[test]
    fn product_name_is_title_and_heading_above_the_description() {
        let html = PaywallPage::new()
            .product_name(|_| Some("Rail receipt".into()))
            .render(&offer("A sample receipt record"));
        assert!(html.contains("<title>Payment required — Rail receipt</title>"));
        assert!(
            html.contains("<h1>Rail receipt</h1><p class=\"lede\">A sample receipt record</p>")
        );
        assert_eq!(html.matches("<h1>").count(), 1);
    }

    #[test]
    fn without_a_product_name_the_description_is_title_and_heading() {
        for page in [
            PaywallPage::new(),
            PaywallPage::new().product_name(|_| None),
            PaywallPage::new().product_name(|_| Some(String::new())),
        ] {
            let html = page.render(&offer("A report"));
            assert!(html.contains("<title>Payment required — A report</title>"));
            assert!(html.contains("<h1>A report</h1>"));
            assert!(!html.contains("class=\"lede\""));
        }
    }

    #[test]
    fn hostile_product_name_is_escaped() {
        let hostile = "Kit</title><script>alert(1)</script>\"'&";
        let html = PaywallPage::new()
            .product_name(move |_| Some(hostile.to_owned()))
            .render(&offer("<i>plain</i>"));
        let escaped = "Kit&lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;";
        assert!(html.contains(&format!("<title>Payment required — {escaped}</title>")));
        assert!(html.contains(&format!("<h1>{escaped}</h1>")));
        assert!(html.contains("<p class=\"lede\">&lt;i&gt;plain&lt;/i&gt;</p>"));
        assert_eq!(html.matches("<script").count(), 2, "{html}");
        assert!(!html.contains("<i>"));
    }

    #[test]
    fn sign_in_is_hidden_until_the_script_finds_a_challenge() {
        let html = PaywallPage::new().render(&offer("A report"));
        assert!(html.contains("<div id=\"sign-in\" hidden>"));
        assert!(html.contains("Already bought? Sign in with your wallet</button>"));
    }

    #[test]
    fn policy_hashes_the_inline_script_and_style() {
        let policy = content_security_policy();
        let policy = policy.to_str().unwrap();
        assert!(policy.contains(&sha256_source(SCRIPT)));
        assert!(policy.contains(&sha256_source(STYLE)));
        assert!(policy.starts_with("default-src 'none'"));
    }
}
