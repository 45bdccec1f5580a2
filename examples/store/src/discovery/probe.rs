//! Probing channels and announcing the store's origin: outbound HTTP to configured URLs only,
//! with short timeouts, no redirects and bounded reads.

use std::time::Instant;

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::{Client, Url};
use serde_json::{Value, json};

use super::channels::{Announce, ChannelSpec, ChannelStatus, Probe, ProbeKind};

/// Largest answer read from a channel.
const MAX_READ_BYTES: usize = 2 * 1024 * 1024;

/// Items asked per page of a facilitator listing, and the most pages read.
const PAGE_SIZE: usize = 100;
const MAX_PAGES: usize = 3;

/// What a probe found.
#[derive(Debug)]
pub(super) struct ProbeOutcome {
    /// `live` (listed), `not_indexed` (reachable, not listed) or `down`.
    pub status: ChannelStatus,
    /// Details for the report.
    pub report: Value,
}

/// Runs `probe` for a store at `base_url` (whose origin is `origin`).
pub(super) async fn probe(
    client: &Client,
    probe: &Probe,
    base_url: &str,
    origin: &str,
) -> ProbeOutcome {
    let started = Instant::now();
    let url = probe.url.replace(
        "{origin}",
        &utf8_percent_encode(origin, NON_ALPHANUMERIC).to_string(),
    );
    let found = match probe.kind {
        ProbeKind::FacilitatorResources => facilitator_lists(client, &url, base_url).await,
        ProbeKind::ContainsOrigin => page_names(client, &url, origin).await,
    };
    let elapsed_ms = started.elapsed().as_millis();
    match found {
        Ok(found) => ProbeOutcome {
            status: if found {
                ChannelStatus::Live
            } else {
                ChannelStatus::NotIndexed
            },
            report: json!({"url": url, "found": found, "elapsedMs": elapsed_ms}),
        },
        Err(error) => ProbeOutcome {
            status: ChannelStatus::Down,
            report: json!({"url": url, "found": false, "error": error, "elapsedMs": elapsed_ms}),
        },
    }
}

/// Whether a facilitator's `/discovery/resources` lists a resource under `base_url`.
async fn facilitator_lists(client: &Client, url: &str, base_url: &str) -> Result<bool, String> {
    let prefix = format!("{base_url}/");
    for page in 0..MAX_PAGES {
        let mut page_url = Url::parse(url).map_err(|e| e.to_string())?;
        page_url
            .query_pairs_mut()
            .append_pair("type", "http")
            .append_pair("limit", &PAGE_SIZE.to_string())
            .append_pair("offset", &(page * PAGE_SIZE).to_string());
        let body: Value = serde_json::from_slice(&get(client, page_url.as_str()).await?)
            .map_err(|e| format!("not a JSON listing: {e}"))?;
        let items = body
            .get("items")
            .and_then(Value::as_array)
            .ok_or("not a discovery listing: no `items` array")?;
        let listed = items.iter().any(|item| {
            let resource = item.get("resource");
            resource
                .and_then(Value::as_str)
                .or_else(|| resource.and_then(|r| r.get("url")).and_then(Value::as_str))
                .is_some_and(|resource| resource.starts_with(&prefix))
        });
        if listed {
            return Ok(true);
        }
        let total = body.pointer("/pagination/total").and_then(Value::as_u64);
        let seen = (page + 1) * PAGE_SIZE;
        if items.len() < PAGE_SIZE || total.is_some_and(|total| total <= seen as u64) {
            break;
        }
    }
    Ok(false)
}

/// Whether the page at `url` names the store's host.
async fn page_names(client: &Client, url: &str, origin: &str) -> Result<bool, String> {
    let host = origin.split_once("://").map_or(origin, |(_, host)| host);
    let body = get(client, url).await?;
    Ok(String::from_utf8_lossy(&body).contains(host))
}

/// GETs `url`, requiring a 2xx, reading at most [`MAX_READ_BYTES`].
async fn get(client: &Client, url: &str) -> Result<Vec<u8>, String> {
    let mut response = client
        .get(url)
        .header(
            reqwest::header::ACCEPT,
            "application/json, text/html;q=0.9, */*;q=0.8",
        )
        .send()
        .await
        .map_err(|e| format!("unreachable: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status().as_u16()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("read failed: {e}"))?
    {
        if body.len() + chunk.len() > MAX_READ_BYTES {
            return Err(format!("answer larger than {MAX_READ_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// POSTs the store's `origin` to `channel`'s announce URL.
pub(super) async fn announce(
    client: &Client,
    channel: &ChannelSpec,
    announce: &Announce,
    origin: &str,
) -> Value {
    let body = fill(&announce.body, origin);
    match client.post(&announce.url).json(&body).send().await {
        Ok(response) => {
            let status = response.status();
            json!({
                "channel": channel.id,
                "url": announce.url,
                "result": if status.is_success() { "accepted" } else { "rejected" },
                "httpStatus": status.as_u16(),
            })
        }
        Err(e) => {
            json!({"channel": channel.id, "url": announce.url, "result": "down", "error": e.to_string()})
        }
    }
}

/// `template` with every string `{origin}` inside it replaced by `origin`.
fn fill(template: &Value, origin: &str) -> Value {
    match template {
        Value::String(text) => Value::String(text.replace("{origin}", origin)),
        Value::Array(items) => Value::Array(items.iter().map(|item| fill(item, origin)).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), fill(v, origin)))
                .collect(),
        ),
        other => other.clone(),
    }
}
