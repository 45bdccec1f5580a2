//! The payment core driven without HTTP, as a second adapter (an MCP tool dispatcher) drives it:
//! the same ledger, the same single settlement, typed outcomes instead of responses.

mod common;

use std::sync::Arc;

use common::{Step, accepting, offer, payment, scripted};
use tower::ServiceExt;
use tower_x402::payment::{Outcome, Payments, RequestDigest};
use tower_x402::{Refusal, SettlementMode, X402, X402Layer};

#[tokio::test]
async fn settles_before_the_work_once_and_replays_from_the_ledger() {
    let facilitator = accepting();
    let payments = Arc::new(Payments::new(facilitator.clone()));
    let offer = offer("https://tools.example.com/report", SettlementMode::Before);
    let payload = payment(&offer, 1);
    let requirement = payments.accepted(&offer, &payload).unwrap().clone();

    let first = payments
        .authorize(&offer, payload.clone(), requirement.clone(), call())
        .await;
    let Outcome::Settled(paid) = first else {
        panic!("expected a settlement, got {first:?}");
    };
    let settlement = paid.payment().settlement.clone().unwrap();
    assert!(settlement.success);
    assert!(!paid.payment().replayed);
    drop(paid);

    let again = payments
        .authorize(&offer, payload, requirement, call())
        .await;
    let Outcome::Replayed(replayed) = again else {
        panic!("expected a replay, got {again:?}");
    };
    assert_eq!(replayed.payment().settlement.as_ref(), Some(&settlement));
    assert!(replayed.payment().replayed);
    assert_eq!(
        (facilitator.verify_calls(), facilitator.settle_calls()),
        (0, 1),
        "settled first: `/settle` alone, once"
    );
}

#[tokio::test]
async fn cleared_payments_settle_after_the_work_or_are_released() {
    let facilitator = accepting();
    let payments = Arc::new(Payments::new(facilitator.clone()));
    let offer = offer("https://tools.example.com/render", SettlementMode::After);
    let payload = payment(&offer, 2);
    let requirement = payments.accepted(&offer, &payload).unwrap().clone();

    // The work failed: released unsettled, so the same payment may be used again.
    let Outcome::Cleared(cleared) = payments
        .authorize(&offer, payload.clone(), requirement.clone(), call())
        .await
    else {
        panic!("expected a cleared payment");
    };
    assert!(cleared.payment().settlement.is_none());
    cleared.release().await;
    assert_eq!(facilitator.settle_calls(), 0);

    // The work succeeded: settled once.
    let Outcome::Cleared(cleared) = payments
        .authorize(&offer, payload.clone(), requirement.clone(), call())
        .await
    else {
        panic!("expected a cleared payment");
    };
    let paid = cleared.conclude(true, None, None).await.unwrap().unwrap();
    assert!(paid.payment().settlement.as_ref().unwrap().success);
    drop(paid);
    assert!(matches!(
        payments
            .authorize(&offer, payload, requirement, call())
            .await,
        Outcome::Replayed(_)
    ));
    assert_eq!(
        (facilitator.verify_calls(), facilitator.settle_calls()),
        (2, 1)
    );
}

#[tokio::test]
async fn refusals_and_doubt_are_typed() {
    let offer = offer("https://tools.example.com/report", SettlementMode::Before);
    let payload = payment(&offer, 3);
    // `/verify` first: its refusal is typed as an invalid payment.
    let invalid = Arc::new(
        Payments::new(scripted(
            Step::Refuse("invalid_exact_evm_payload_signature".to_owned()),
            Step::Trust,
        ))
        .verify_before_settling(true),
    );
    let requirement = invalid.accepted(&offer, &payload).unwrap().clone();
    match invalid
        .authorize(&offer, payload.clone(), requirement.clone(), call())
        .await
    {
        Outcome::Refused(Refusal::InvalidPayment { reason }) => {
            assert_eq!(reason, "invalid_exact_evm_payload_signature");
        }
        other => panic!("expected an invalid payment, got {other:?}"),
    }

    // Settled first, `/settle`'s refusal is the answer: nothing moved, the payment released.
    let refusing = Arc::new(Payments::new(scripted(
        Step::Trust,
        Step::Refuse("invalid_exact_evm_payload_signature".to_owned()),
    )));
    match refusing
        .authorize(&offer, payload.clone(), requirement.clone(), call())
        .await
    {
        Outcome::Refused(Refusal::SettlementRefused(settlement)) => {
            let reason = settlement.error_reason.as_deref();
            assert_eq!(reason, Some("invalid_exact_evm_payload_signature"));
        }
        other => panic!("expected a refused settlement, got {other:?}"),
    }

    let lost = scripted(Step::Trust, Step::Status(500));
    let doubtful = Arc::new(Payments::new(lost.clone()));
    let outcome = doubtful
        .authorize(&offer, payload.clone(), requirement.clone(), call())
        .await;
    assert!(
        matches!(outcome, Outcome::InDoubt(Refusal::SettlementInDoubt { .. })),
        "{outcome:?}"
    );

    // A payment for another accept than any on offer never reaches the facilitator.
    let mut other = payload;
    other.accepted.amount = "1".parse().unwrap();
    assert!(matches!(
        invalid.accepted(&offer, &other),
        Err(Refusal::NoMatchingRequirement {
            field: Some("amount")
        })
    ));
}

#[tokio::test]
async fn a_layer_and_another_adapter_share_one_ledger() {
    let facilitator = accepting();
    let offer = offer("https://api.example.com/report", SettlementMode::Before);
    let layer = X402Layer::new(facilitator.clone(), Arc::clone(&offer));
    let payments = layer.payments();
    let service = X402::new(tower::service_fn(common::echo_payment), layer.clone());

    let payload = payment(&offer, 4);
    let response = service
        .oneshot(common::paid_get("/report", &payload))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    // The request the layer recorded: `GET /report`. The same request is delivered again;
    // another one (the tool call of another adapter) is refused.
    let requirement = payments.accepted(&offer, &payload).unwrap().clone();
    let get = RequestDigest::http(&http::Method::GET, &"/report".parse().unwrap());
    assert!(matches!(
        payments
            .authorize(&offer, payload.clone(), requirement.clone(), get)
            .await,
        Outcome::Replayed(_)
    ));
    assert!(matches!(
        payments
            .authorize(&offer, payload, requirement, call())
            .await,
        Outcome::Refused(Refusal::UsedForAnotherRequest {
            settlement: Some(_)
        })
    ));
    assert_eq!(facilitator.settle_calls(), 1);
}

/// The request every tool call here comes with.
fn call() -> RequestDigest {
    RequestDigest::tool("report", None)
}
