//! `/discovery` and `/api/discovery`: the map of every channel through which the store can be
//! found, probed on GET, and the announcement of the store's own origin on POST.
//!
//! Only URLs from the configured channel list are ever contacted. A GET probes at most once
//! per [`PROBE_CACHE`] (concurrent GETs share one probe round); a POST announces at most once
//! per [`ANNOUNCE_INTERVAL`] and never for an origin other than the store's own.

pub mod channels;
mod probe;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;
use tokio::task::JoinSet;

pub use channels::{ChannelSpec, ChannelStatus};

use crate::catalog::Catalog;
use crate::config::Config;
use crate::http_errors::json_error;
use crate::sales::standing::Standing;

/// Time limit of one outbound probe or announcement.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a probe round's findings are reused.
pub const PROBE_CACHE: Duration = Duration::from_secs(30);

/// Least time between two announcements.
pub const ANNOUNCE_INTERVAL: Duration = Duration::from_secs(60);

/// Per-app memory of the last probe round and the last announcement; the app gives both
/// discovery handlers one through an [`Extension`].
#[derive(Debug, Default)]
pub struct Memory {
    probed: Mutex<Option<(Instant, Value)>>,
    announced: Mutex<Option<Instant>>,
}

/// The channels in effect: the configured list or the built-in one.
pub fn channels(config: &Config) -> Vec<ChannelSpec> {
    config
        .discovery_channels
        .clone()
        .unwrap_or_else(|| channels::defaults(&config.base_url))
}

/// The map as configured, without probing (for the MCP `get_discovery` tool).
pub fn configured_map(config: &Config, catalog: &Catalog) -> Value {
    let entries = channels(config).into_iter().map(|channel| {
        let status = channel.status;
        (channel, status, Value::Null)
    });
    map(config, catalog, entries, false)
}

fn map(
    config: &Config,
    catalog: &Catalog,
    entries: impl Iterator<Item = (ChannelSpec, ChannelStatus, Value)>,
    probed: bool,
) -> Value {
    let mut channels = Map::new();
    let mut indexed = 0u64;
    for (channel, status, probe) in entries {
        if status == ChannelStatus::Live && channel.is_third_party_index() {
            indexed += 1;
        }
        channels.insert(
            channel.id.clone(),
            json!({
                "id": channel.id,
                "name": channel.name,
                "kind": channel.kind,
                "url": channel.url,
                "status": status,
                "how": channel.how,
                "notes": channel.notes,
                "probe": probe,
                "acceptsAnnouncement": channel.announce.is_some(),
            }),
        );
    }
    let doors: Vec<&crate::paywall::doors::Door> = catalog.doors().iter().collect();
    json!({
        "origin": config.origin(),
        "probed": probed,
        "indexed": indexed,
        "channels": channels,
        "doors": doors,
        "funnel": crate::sales::standing::STAGES,
    })
}

/// `GET /discovery`, `GET /api/discovery`: probes every channel that has a probe, concurrently,
/// and reports what it found; reports the count of third-party indexes listing the store to
/// the funnel.
pub async fn probed_map(
    State(config): State<Arc<Config>>,
    State(catalog): State<Arc<Catalog>>,
    State(standing): State<Standing>,
    State(http): State<reqwest::Client>,
    Extension(memory): Extension<Arc<Memory>>,
) -> Response {
    let mut cached = memory.probed.lock().await;
    if let Some((at, value)) = cached.as_ref()
        && at.elapsed() < PROBE_CACHE
    {
        return with_no_store(Json(value.clone()).into_response());
    }
    let specs = channels(&config);
    let origin = config.origin();
    let mut probes = JoinSet::new();
    for (index, channel) in specs.iter().enumerate() {
        if let Some(spec) = channel.probe.clone() {
            let (client, base, origin) = (http.clone(), config.base_url.clone(), origin.clone());
            probes
                .spawn(async move { (index, probe::probe(&client, &spec, &base, &origin).await) });
        }
    }
    let mut outcomes: Vec<Option<probe::ProbeOutcome>> = specs.iter().map(|_| None).collect();
    while let Some(joined) = probes.join_next().await {
        match joined {
            Ok((index, outcome)) => outcomes[index] = Some(outcome),
            Err(e) => tracing::warn!(error = %e, "a discovery probe task failed"),
        }
    }
    let entries = specs
        .into_iter()
        .zip(outcomes)
        .map(|(channel, outcome)| match outcome {
            Some(outcome) => (channel, outcome.status, outcome.report),
            None if channel.probe.is_some() => (
                channel,
                ChannelStatus::Down,
                json!({"error": "probe did not complete"}),
            ),
            None => {
                let status = channel.status;
                (channel, status, Value::Null)
            }
        });
    let value = map(&config, &catalog, entries, true);
    standing.set_indexed(value["indexed"].as_u64().unwrap_or(0));
    *cached = Some((Instant::now(), value.clone()));
    with_no_store(Json(value).into_response())
}

fn with_no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `POST /api/discovery`: announces the store's own origin to every channel that accepts a URL.
///
/// The body may be empty or a JSON object naming the origin to announce (`origin` or `url`);
/// anything but the store's own origin is refused with 403.
pub async fn announce(
    State(config): State<Arc<Config>>,
    State(http): State<reqwest::Client>,
    Extension(memory): Extension<Arc<Memory>>,
    body: Bytes,
) -> Response {
    let own = config.origin();
    if let Err((status, message)) = check_announce_body(&body, &own) {
        return json_error(status, message);
    }
    {
        let mut last = memory.announced.lock().await;
        if let Some(at) = *last {
            let since = at.elapsed();
            if since < ANNOUNCE_INTERVAL {
                let wait = (ANNOUNCE_INTERVAL - since).as_secs().max(1);
                let mut response = json_error(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!(
                        "the store announced itself less than {}s ago; retry in {wait}s",
                        ANNOUNCE_INTERVAL.as_secs()
                    ),
                );
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(wait));
                return response;
            }
        }
        *last = Some(Instant::now());
    }
    let mut announcements = JoinSet::new();
    for channel in channels(&config) {
        if let Some(target) = channel.announce.clone() {
            let (client, origin) = (http.clone(), own.clone());
            announcements
                .spawn(async move { probe::announce(&client, &channel, &target, &origin).await });
        }
    }
    let mut results: Vec<Value> = announcements.join_all().await;
    results.sort_by(|a, b| a["channel"].as_str().cmp(&b["channel"].as_str()));
    Json(json!({"origin": own, "announced": results})).into_response()
}

/// Accepts an empty body or `{"origin": …}` / `{"url": …}` naming the store's own origin.
fn check_announce_body(body: &[u8], own: &str) -> Result<(), (StatusCode, String)> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else {
        return Err((
            StatusCode::BAD_REQUEST,
            "body must be empty or a JSON object {\"origin\": \"<this store's origin>\"}"
                .to_owned(),
        ));
    };
    for (key, value) in &fields {
        if key != "origin" && key != "url" {
            return Err((
                StatusCode::BAD_REQUEST,
                format!("unexpected field `{key}`: only `origin` (or `url`) is read"),
            ));
        }
        let named = value
            .as_str()
            .and_then(|text| reqwest::Url::parse(text).ok())
            .map(|url| url.origin().ascii_serialization());
        if named.as_deref() != Some(own) {
            return Err((
                StatusCode::FORBIDDEN,
                format!("the store announces only its own origin ({own}), never a third party's"),
            ));
        }
    }
    Ok(())
}
