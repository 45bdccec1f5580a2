//! The discovery map: probes against a loopback fake channel, and announcements that never
//! name another origin and are rate-limited.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tower_x402_sandbox::SandboxFacilitator;

use super::support::{TestStore, serve, store, store_with};
use x402_store::discovery::channels::{
    Announce, ChannelKind, ChannelSpec, ChannelStatus, Probe, ProbeKind,
};

/// What the fake channel saw.
#[derive(Default)]
struct Seen {
    listing_hits: usize,
    announcements: Vec<Value>,
}

/// A fake channel: a facilitator listing naming the store, a page not naming it, an announce
/// endpoint that records what it receives.
async fn fake_channel() -> (String, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let router = Router::new()
        .route(
            "/discovery/resources",
            get(|State(seen): State<Arc<Mutex<Seen>>>| async move {
                seen.lock().unwrap().listing_hits += 1;
                axum::Json(json!({
                    "x402Version": 2,
                    "items": [
                        {"resource": "https://other.example/api/thing", "type": "http"},
                        {"resource": "http://127.0.0.1:4020/api/x402/store-rail-receipt", "type": "http"},
                    ],
                    "pagination": {"limit": 100, "offset": 0, "total": 2},
                }))
            }),
        )
        .route("/empty-listing", get(|| async { axum::Json(json!({"items": [], "pagination": {"total": 0}})) }))
        .route("/page", get(|| async { "<html><body>Some other shops: other.example</body></html>" }))
        .route("/broken", get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "down") }))
        .route(
            "/announce",
            post(|State(seen): State<Arc<Mutex<Seen>>>, body: axum::Json<Value>| async move {
                seen.lock().unwrap().announcements.push(body.0);
                StatusCode::OK
            }),
        )
        .with_state(seen.clone());
    let address = serve(router).await;
    (format!("http://{address}"), seen)
}

fn channel(
    id: &str,
    kind: ChannelKind,
    probe: Option<(String, ProbeKind)>,
    announce: Option<String>,
) -> ChannelSpec {
    ChannelSpec {
        id: id.to_owned(),
        name: id.to_owned(),
        kind,
        url: "http://127.0.0.1:9/".to_owned(),
        how: "test".to_owned(),
        notes: String::new(),
        status: ChannelStatus::Submit,
        probe: probe.map(|(url, kind)| Probe { url, kind }),
        announce: announce.map(|url| Announce {
            url,
            body: json!({"json": {"origin": "{origin}"}}),
        }),
    }
}

async fn store_with_channels(channels: Vec<ChannelSpec>) -> TestStore {
    store_with(
        move |c| c.discovery_channels = Some(channels),
        Arc::new(SandboxFacilitator::new()),
    )
    .await
}

async fn get_probes_each_channel_and_reports_indexed() {
    let (fake, seen) = fake_channel().await;
    // A port nothing listens on, for a channel that is down.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        format!("http://127.0.0.1:{port}/discovery/resources")
    };
    let store = store_with_channels(vec![
        channel(
            "listed",
            ChannelKind::FacilitatorIndex,
            Some((
                format!("{fake}/discovery/resources"),
                ProbeKind::FacilitatorResources,
            )),
            None,
        ),
        channel(
            "unlisted",
            ChannelKind::FacilitatorIndex,
            Some((
                format!("{fake}/empty-listing"),
                ProbeKind::FacilitatorResources,
            )),
            None,
        ),
        channel(
            "page",
            ChannelKind::Curated,
            Some((
                format!("{fake}/page?q={{origin}}"),
                ProbeKind::ContainsOrigin,
            )),
            None,
        ),
        channel(
            "erroring",
            ChannelKind::Crawler,
            Some((format!("{fake}/broken"), ProbeKind::ContainsOrigin)),
            None,
        ),
        channel(
            "unreachable",
            ChannelKind::FacilitatorIndex,
            Some((closed, ProbeKind::FacilitatorResources)),
            None,
        ),
        channel("manual", ChannelKind::McpDirectory, None, None),
    ])
    .await;

    for path in ["/api/discovery", "/discovery"] {
        let answer = store.get(path).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}");
        let map = &answer.json;
        assert_eq!(map["probed"], true);
        let status = |id: &str| map["channels"][id]["status"].as_str().unwrap().to_owned();
        assert_eq!(status("listed"), "live");
        assert_eq!(status("unlisted"), "not_indexed");
        assert_eq!(status("page"), "not_indexed");
        assert_eq!(status("erroring"), "down");
        assert_eq!(status("unreachable"), "down");
        assert_eq!(status("manual"), "submit");
        assert_eq!(map["indexed"], 1);
        assert!(
            map["channels"]["page"]["probe"]["url"]
                .as_str()
                .unwrap()
                .ends_with("q=http%3A%2F%2F127%2E0%2E0%2E1%3A4020")
        );
        assert_eq!(map["doors"].as_array().unwrap().len(), 3);
    }
    // Probe rounds are shared for a while: one listing request for both GETs.
    assert_eq!(seen.lock().unwrap().listing_hits, 1);
    let report = store.state.standing.snapshot().await.unwrap();
    assert_eq!(report.live("indexed"), Some(1));
}

async fn announce_posts_the_own_origin_only_and_is_rate_limited() {
    let (fake, seen) = fake_channel().await;
    let store = store_with_channels(vec![
        channel(
            "accepts-url",
            ChannelKind::Crawler,
            None,
            Some(format!("{fake}/announce")),
        ),
        channel("no-url", ChannelKind::Curated, None, None),
    ])
    .await;
    let post = |body: &str| {
        Request::post("/api/discovery")
            .header("content-type", "application/json")
            .body(Body::from(body.to_owned()))
            .unwrap()
    };

    for foreign in [
        r#"{"origin":"https://evil.example"}"#,
        r#"{"url":"http://127.0.0.1:4021/"}"#,
        r#"{"origin":"https://127.0.0.1:4020"}"#,
        r#"{"origin":5}"#,
    ] {
        let answer = store.send(post(foreign)).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{foreign}");
        assert!(answer.json["error"].is_string());
    }
    assert_eq!(
        store.send(post("not json")).await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        store.send(post(r#"{"channels":["x"]}"#)).await.status,
        StatusCode::BAD_REQUEST
    );
    assert!(
        seen.lock().unwrap().announcements.is_empty(),
        "nothing announced for refused requests"
    );

    let answer = store
        .send(post(r#"{"origin":"http://127.0.0.1:4020/anything"}"#))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    assert_eq!(answer.json["origin"], "http://127.0.0.1:4020");
    let announced = answer.json["announced"].as_array().unwrap();
    assert_eq!(announced.len(), 1);
    assert_eq!(announced[0]["channel"], "accepts-url");
    assert_eq!(announced[0]["result"], "accepted");
    assert_eq!(
        seen.lock().unwrap().announcements,
        vec![json!({"json": {"origin": "http://127.0.0.1:4020"}})]
    );

    let again = store.send(post("")).await;
    assert_eq!(again.status, StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = again.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait));
    assert_eq!(seen.lock().unwrap().announcements.len(), 1);
}

async fn the_built_in_map_uses_the_specified_kinds_and_statuses() {
    let store = store().await;
    let map = x402_store::discovery::configured_map(&store.state.config, &store.state.catalog);
    let kinds = [
        "first_party",
        "facilitator_index",
        "crawler",
        "curated",
        "mcp_directory",
        "webmcp",
        "do_not",
    ];
    let statuses = ["live", "not_indexed", "submit", "down", "n_a"];
    let channels = map["channels"].as_object().unwrap();
    for kind in kinds {
        assert!(
            channels.values().any(|c| c["kind"] == kind),
            "a channel of kind {kind}"
        );
    }
    for channel in channels.values() {
        for field in ["id", "name", "url", "how", "notes"] {
            assert!(channel[field].is_string(), "{field}");
        }
        assert!(statuses.contains(&channel["status"].as_str().unwrap()));
    }
    assert_eq!(
        map["funnel"],
        json!([
            "indexed",
            "retrieved",
            "considered",
            "selected",
            "purchased",
            "used",
            "returned",
            "referred"
        ])
    );
}

super::support::on_both_backends!(
    get_probes_each_channel_and_reports_indexed,
    announce_posts_the_own_origin_only_and_is_rate_limited,
    the_built_in_map_uses_the_specified_kinds_and_statuses,
);
