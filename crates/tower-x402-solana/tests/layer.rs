//! The layer selling on Solana through the sandbox facilitator, everything over HTTP on
//! loopback: a purchase, a replay and a re-encoded replay re-delivered, 20 concurrent copies
//! settled once, tampered transfers refused, and a settlement whose answer was lost resolved by
//! the Solana reconciler from the sandbox's JSON-RPC.

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use tower_x402::payment::Payments;
use tower_x402::{HttpFacilitator, Offer, X402Layer};
use tower_x402_sandbox::{SandboxFacilitator, SandboxSolanaWallet, Step};
use tower_x402_solana::{SolanaExact, SolanaRpcReconciler, Transaction};
use x402_wire::{
    AtomicAmount, PAYMENT_REQUIRED, PAYMENT_RESPONSE, PAYMENT_SIGNATURE, PaymentPayload,
    PaymentRequired, ResourceInfo, SettleResponse, UsdcDeployment, header,
};

const PAY_TO: &str = "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4";
const PRICE: AtomicAmount = AtomicAmount(100_000);

/// The sandbox facilitator on loopback and a store selling `/report` on Solana devnet through it
/// on loopback; `solana` registers [`SolanaExact`], `reconcile` the Solana reconciler reading
/// the sandbox's RPC. Answers the facilitator and the store's URL.
async fn shop(solana: bool, reconcile: bool) -> (SandboxFacilitator, String) {
    let facilitator = SandboxFacilitator::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let facilitator_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(facilitator.clone().serve(listener));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let offer = Offer::builder(ResourceInfo::new(format!("{url}/report")))
        .accept(facilitator.solana_requirement(&UsdcDeployment::SOLANA_DEVNET, PRICE, PAY_TO))
        .build()
        .unwrap();
    let mut payments = Payments::new(HttpFacilitator::new(&facilitator_url).unwrap());
    if solana {
        payments = payments.scheme(SolanaExact::new());
    }
    if reconcile {
        let rpc = format!("{facilitator_url}/rpc/solana");
        payments = payments.reconciler(SolanaRpcReconciler::new(&rpc).unwrap());
    }
    let app = Router::new().route(
        "/report",
        get(|| async { "the report" }).layer(X402Layer::with_payments(payments, offer)),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (facilitator, url)
}

async fn challenge(url: &str) -> PaymentRequired {
    let first = reqwest::get(format!("{url}/report")).await.unwrap();
    assert_eq!(first.status(), 402);
    header::decode(first.headers()[PAYMENT_REQUIRED].as_bytes()).unwrap()
}

/// The paid GET: status, settlement (when any) and body.
async fn buy(url: &str, payment: &PaymentPayload) -> (u16, Option<SettleResponse>, String) {
    let response = reqwest::Client::new()
        .get(format!("{url}/report"))
        .header(PAYMENT_SIGNATURE, header::encode(payment).unwrap())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let settlement = response
        .headers()
        .get(PAYMENT_RESPONSE)
        .map(|value| header::decode(value.as_bytes()).unwrap());
    (status, settlement, response.text().await.unwrap())
}

/// `payment` with `slot` as the bytes of its fee payer's signature: the same signed transfer,
/// encoded otherwise.
fn re_encoded(payment: &PaymentPayload, slot: u8) -> PaymentPayload {
    let mut transaction = tower_x402_solana::payload_transaction(payment).unwrap();
    transaction.signatures[0] = [slot; 64];
    with_transaction(payment, &transaction)
}

fn with_transaction(payment: &PaymentPayload, transaction: &Transaction) -> PaymentPayload {
    let mut changed = payment.clone();
    changed.payload = serde_json::value::to_raw_value(
        &serde_json::json!({"transaction": transaction.to_base64()}),
    )
    .unwrap();
    changed
}

#[tokio::test]
async fn buys_on_solana_and_a_replay_is_delivered_again_from_its_record() {
    let (facilitator, url) = shop(true, false).await;
    let wallet = SandboxSolanaWallet::random();
    let required = challenge(&url).await;
    assert_eq!(
        required.accepts[0].extra.as_ref().unwrap()["feePayer"],
        facilitator.solana_fee_payer()
    );
    let payment = wallet.pay(&required).unwrap();

    let (status, settlement, body) = buy(&url, &payment).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "the report");
    let settlement = settlement.unwrap();
    assert!(settlement.success);
    assert_eq!(settlement.payer.as_deref(), Some(wallet.address().as_str()));
    assert_eq!(
        settlement.transaction,
        facilitator.solana_settlements()[0].transaction
    );

    let (status, again, body) = buy(&url, &payment).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(again.unwrap().transaction, settlement.transaction);
    assert_eq!(facilitator.solana_settlements().len(), 1);
    assert_eq!(facilitator.settle_calls(), 1);
    assert_eq!(
        facilitator.solana_balance_of(&wallet.address(), UsdcDeployment::SOLANA_DEVNET.asset),
        AtomicAmount(1_000_000_000 - PRICE.get())
    );
}

#[tokio::test]
async fn a_re_encoded_replay_is_the_same_payment() {
    let (facilitator, url) = shop(true, false).await;
    let wallet = SandboxSolanaWallet::random();
    let payment = wallet.pay(&challenge(&url).await).unwrap();
    let (status, settlement, body) = buy(&url, &payment).await;
    assert_eq!(status, 200, "{body}");

    // Other bytes where the facilitator's signature goes: the transfer the buyer signed is the
    // same, so is the payment: delivered again, not verified nor settled again.
    let (status, again, body) = buy(&url, &re_encoded(&payment, 0x5a)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(again.unwrap().transaction, settlement.unwrap().transaction);
    assert_eq!(facilitator.verify_calls(), 1);
    assert_eq!(facilitator.solana_settlements().len(), 1);
}

#[tokio::test]
async fn twenty_concurrent_copies_settle_once() {
    let (facilitator, url) = shop(true, false).await;
    let wallet = SandboxSolanaWallet::random();
    let payment = wallet.pay(&challenge(&url).await).unwrap();
    let url: Arc<str> = url.into();
    let copies = (0..20u8).map(|copy| {
        // Half of them re-encoded, each its own way.
        let payment = if copy % 2 == 0 {
            payment.clone()
        } else {
            re_encoded(&payment, copy)
        };
        let url = Arc::clone(&url);
        tokio::spawn(async move { buy(&url, &payment).await })
    });
    let mut transactions = Vec::new();
    for copy in copies {
        let (status, settlement, body) = copy.await.unwrap();
        assert_eq!(status, 200, "{body}");
        transactions.push(settlement.unwrap().transaction);
    }
    transactions.dedup();
    assert_eq!(transactions.len(), 1, "{transactions:?}");
    assert_eq!(facilitator.solana_settlements().len(), 1);
    assert_eq!(facilitator.settle_calls(), 1);
    assert_eq!(
        facilitator.solana_balance_of(&wallet.address(), UsdcDeployment::SOLANA_DEVNET.asset),
        AtomicAmount(1_000_000_000 - PRICE.get())
    );
}

#[tokio::test]
async fn tampered_transfers_are_refused_and_move_nothing() {
    let (facilitator, url) = shop(true, false).await;
    let wallet = SandboxSolanaWallet::random();
    let required = challenge(&url).await;
    let accept = &required.accepts[0];
    let honest = wallet.transaction_for(accept, [1; 32]).unwrap();
    let resigned = |change: &dyn Fn(&mut tower_x402_solana::Message)| {
        let mut message = honest.message.clone();
        change(&mut message);
        let message_bytes = message.encode();
        let mut transaction = Transaction {
            signatures: vec![[0; 64]; 2],
            message,
            message_bytes,
        };
        transaction.sign(wallet.signing_key()).unwrap();
        transaction
    };
    let cheaper = resigned(&|m| m.instructions[2].data[1..9].copy_from_slice(&1u64.to_le_bytes()));
    let mut unsigned = honest.clone();
    unsigned.signatures[1] = [0; 64];
    let base = SandboxSolanaWallet::payload(&required, accept, &honest);
    for (what, transaction, reason) in [
        (
            "amount",
            cheaper,
            "invalid_exact_svm_payload_amount_insufficient",
        ),
        ("signature", unsigned, "transaction_simulation_failed"),
    ] {
        let (status, _, body) = buy(&url, &with_transaction(&base, &transaction)).await;
        assert_eq!(status, 402, "{what}: {body}");
        assert!(body.contains(reason), "{what}: {body}");
    }
    let mut garbled = base.clone();
    garbled.payload =
        serde_json::value::to_raw_value(&serde_json::json!({"transaction": "AQID"})).unwrap();
    let (status, _, body) = buy(&url, &garbled).await;
    assert_eq!(status, 402, "{body}");
    assert!(
        body.contains("invalid_exact_svm_payload_transaction_could_not_be_decoded"),
        "{body}"
    );
    assert!(facilitator.solana_settlements().is_empty());
}

#[tokio::test]
async fn a_lost_settle_answer_is_resolved_by_the_solana_reconciler() {
    let (facilitator, url) = shop(true, true).await;
    // The sandbox settles, then its answer is lost; any further /settle fails.
    facilitator.queue_settle(Step::AnswerLost);
    let facilitator = facilitator.with_settle(Step::Status(503));
    let wallet = SandboxSolanaWallet::random();
    let payment = wallet.pay(&challenge(&url).await).unwrap();

    // The answer lost: in doubt, never 402.
    let (status, _, body) = buy(&url, &payment).await;
    assert_eq!(status, 503, "{body}");
    let landed = facilitator.solana_settlements();
    assert_eq!(landed.len(), 1);

    // The retry (re-encoded, even) finds the facilitator still failing; the reconciler finds
    // the transfer through the payer's signatures and proves it landed.
    let (status, settlement, body) = buy(&url, &re_encoded(&payment, 7)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "the report");
    assert_eq!(settlement.unwrap().transaction, landed[0].transaction);
    let (status, again, _) = buy(&url, &payment).await;
    assert_eq!(status, 200);
    assert_eq!(again.unwrap().transaction, landed[0].transaction);
    assert_eq!(facilitator.solana_settlements().len(), 1);
    assert_eq!(facilitator.settle_calls(), 2);
}

#[tokio::test]
async fn a_lost_settle_answer_without_a_landing_stays_in_doubt() {
    let (facilitator, url) = shop(true, true).await;
    // Nothing reaches the ledger and no answer comes back.
    let facilitator = facilitator.with_settle(Step::Status(503));
    let wallet = SandboxSolanaWallet::random();
    let payment = wallet.pay(&challenge(&url).await).unwrap();
    let (status, _, body) = buy(&url, &payment).await;
    assert_eq!(status, 503, "{body}");
    // Never 402: the reconciler cannot prove the transfer will not land (its blockhash is
    // still valid).
    let (status, _, body) = buy(&url, &payment).await;
    assert_eq!(status, 503, "{body}");
    assert!(facilitator.solana_settlements().is_empty());
}

/// A buffer the log lines of the test's thread are written to.
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log lines of this test process, every thread's: a subscriber set for one thread only
/// misses lines when tests run side by side (callsites other threads saw first are cached as
/// uninteresting), so the one process-wide subscriber writes here and a test finds its own
/// lines by what only they name.
fn process_logs() -> Logs {
    static LOGS: std::sync::OnceLock<Logs> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other process-wide subscriber in this test binary");
        logs
    })
    .clone()
}

#[tokio::test(flavor = "current_thread")]
async fn a_payment_in_doubt_is_logged_with_its_payer_and_transfer() {
    let logs = process_logs();
    let (facilitator, url) = shop(true, false).await;
    let facilitator = facilitator.with_settle(Step::AnswerLost);
    let wallet = SandboxSolanaWallet::random();
    let payment = wallet.pay(&challenge(&url).await).unwrap();
    let (status, _, body) = buy(&url, &payment).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(facilitator.solana_settlements().len(), 1);

    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let line = text
        .lines()
        .find(|line| {
            line.contains("Solana payment in doubt") && line.contains(wallet.address().as_str())
        })
        .unwrap_or_else(|| panic!("no in-doubt line for the Solana payment:\n{text}"));
    let destination = tower_x402_solana::Pubkey::associated_token_address(
        &PAY_TO.parse().unwrap(),
        &UsdcDeployment::SOLANA_DEVNET.asset.parse().unwrap(),
        &tower_x402_solana::TOKEN_PROGRAM,
    );
    for field in [
        format!("payer=\"{}\"", wallet.address()),
        format!("destination=\"{destination}\""),
        format!("amount=\"{}\"", PRICE.get()),
        format!("mint=\"{}\"", UsdcDeployment::SOLANA_DEVNET.asset),
        "message_hash=".to_owned(),
    ] {
        assert!(line.contains(&field), "{field} missing from: {line}");
    }
    // The core's own line about the payment names the same payer and transfer.
    let hash = line
        .split("message_hash=")
        .nth(1)
        .and_then(|rest| rest.trim_start_matches('"').split(['"', ' ']).next())
        .unwrap();
    let core_line = text
        .lines()
        .find(|line| {
            line.contains("payment in doubt: /settle may have moved money") && line.contains(hash)
        })
        .unwrap_or_else(|| {
            panic!("the core's in-doubt line does not name the transfer {hash}:\n{text}")
        });
    assert!(
        core_line.contains(&format!("payer=\"{}\"", wallet.address())),
        "{core_line}"
    );
}
