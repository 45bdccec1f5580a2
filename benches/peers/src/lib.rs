//! What the peers' apps share: the command line and serving on a loopback port, the in-process
//! instant facilitators, signed payments and the allocation-counting harness.

use std::io::Write;

pub mod allocations;
pub mod instant;
pub mod payment;

use axum::Router;

/// The measured handler, the same as the load benchmark's own app.
pub async fn handler() -> &'static str {
    "the report"
}

/// The value of `--facilitator`, or exits with a usage line naming `program`.
pub fn facilitator_url(program: &str) -> String {
    let mut args = std::env::args().skip(1);
    match (args.next().as_deref(), args.next(), args.next()) {
        (Some("--facilitator"), Some(url), None) => url,
        _ => {
            eprintln!("usage: {program} --facilitator http://127.0.0.1:PORT");
            std::process::exit(2);
        }
    }
}

/// Serves `app` on a free loopback port, after printing the address as one line.
pub async fn serve(app: Router) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{}", listener.local_addr().expect("address")).expect("stdout");
    stdout.flush().expect("stdout");
    axum::serve(listener, app).await.expect("serve");
}
