//! The store's MCP endpoint on arbitrary request bodies: the JSON-RPC parser and dispatcher
//! (single messages, batches, every tool's argument checks) never panic, and every answer is
//! 200/202/400 with a JSON-RPC body or none.
#![no_main]

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use http::{Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt as _;
use tower_x402_sandbox::SandboxFacilitator;
use x402_store::app::{app, build_state_with};
use x402_store::config::Config;

struct World {
    runtime: tokio::runtime::Runtime,
    app: axum::Router,
    _dir: tempfile::TempDir,
}

static WORLD: OnceLock<World> = OnceLock::new();

fn world() -> &'static World {
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let dir = tempfile::tempdir().expect("temporary directory");
        let database = format!("sqlite://{}", dir.path().join("store.db").display());
        let state = runtime
            .block_on(build_state_with(
                Config::for_tests(database),
                Arc::new(SandboxFacilitator::new()),
                true,
            ))
            .expect("store");
        World {
            runtime,
            app: app(state),
            _dir: dir,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let world = world();
    let request = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Body::from(data.to_vec()))
        .expect("request");
    let response = world
        .runtime
        .block_on(world.app.clone().oneshot(request))
        .expect("infallible");
    let status = response.status();
    assert!(
        [StatusCode::OK, StatusCode::ACCEPTED, StatusCode::BAD_REQUEST, StatusCode::PAYLOAD_TOO_LARGE]
            .contains(&status),
        "{status}"
    );
    let body = world
        .runtime
        .block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
        .expect("body");
    if status != StatusCode::ACCEPTED {
        let answer: serde_json::Value = serde_json::from_slice(&body).expect("a JSON answer");
        assert!(answer.is_object() || answer.is_array());
    }
});
