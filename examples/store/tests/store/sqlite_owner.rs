//! One `store` process per SQLite file: a second one started on the same file is refused at
//! start-up with a message naming the file, the first keeps serving, and the file is free again
//! once the first process dies, however it dies.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::reliability;
use reqwest::StatusCode;

/// How long any one wait in this test may last.
const PATIENCE: Duration = Duration::from_secs(30);

/// A `store` child process, killed when dropped.
struct StoreProcess(Child);

impl Drop for StoreProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_store(database: &str) -> (StoreProcess, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(env!("CARGO_BIN_EXE_store"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--database-url", database])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the store binary starts");
    (StoreProcess(child), format!("http://127.0.0.1:{port}"))
}

async fn answers(client: &reqwest::Client, base: &str) -> bool {
    client
        .get(format!("{base}/.well-known/x402.json"))
        .send()
        .await
        .is_ok_and(|response| response.status() == StatusCode::OK)
}

async fn wait_until_ready(client: &reqwest::Client, base: &str) {
    let started = Instant::now();
    while !answers(client, base).await {
        assert!(started.elapsed() < PATIENCE, "the store did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_second_process_on_one_sqlite_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data").join("store.db");
    let database = format!("sqlite://{}", file.display());
    let client = reqwest::Client::new();

    let (mut first, first_base) = spawn_store(&database);
    wait_until_ready(&client, &first_base).await;

    let (mut second, _) = spawn_store(&database);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = second.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "a second process on the same SQLite file kept running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut second.0.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains("STORE_DATABASE_URL")
            && stderr.contains("another store process")
            && stderr.contains(&file.display().to_string()),
        "{stderr}"
    );
    assert!(
        answers(&client, &first_base).await,
        "the first process keeps serving"
    );

    // Killed outright, the first process leaves no stale lock behind.
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let (_third, third_base) = spawn_store(&database);
    wait_until_ready(&client, &third_base).await;

    let row = reliability::Row {
        fault: "a second `store` process started on the SQLite file of a running one; then the \
                first killed (SIGKILL) and another started"
            .to_owned(),
        mode: "before",
        client_sees: "second refused at start-up (exit 1, the file named) → first answers 200 → \
                      after the kill a new process starts and answers 200"
            .to_owned(),
        inner_ran: 0,
        transfers: 0,
        delivered_unpaid: false,
    };
    reliability::check("store-sqlite-owner", &[row]);
}
