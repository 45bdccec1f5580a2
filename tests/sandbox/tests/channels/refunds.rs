//! Cooperative refunds: partial and full, the nonce advancing even when nothing moves, a
//! server-owned authorizer's signatures, a refund shrinking a pending withdrawal.

use crate::support::*;

#[tokio::test]
async fn refunds_partial_and_full_with_the_nonce_advancing_even_when_nothing_moves() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    let payer = channel.wallet.address();
    channel.open(&sandbox, 50_000).await;
    let charged = 3_000;

    // The payer asks for 10,000 back with its zero-charge voucher; the server verifies it and
    // completes it with the nonce and the claim of what was charged.
    let request = channel
        .wallet
        .refund_payment(&accept, &channel.config, charged, Some(10_000))
        .unwrap();
    let verified = sandbox.verify(&request, &accept).await;
    assert!(verified.is_valid, "{verified:?}");
    assert_eq!(verified.extra.as_ref().unwrap().refund_nonce, "0");
    let complete = |amount: u128, nonce: u128| {
        let mut payment = request.clone();
        payment.payload = serde_json::value::to_raw_value(&BatchPayload::Refund {
            channel_config: channel.config.clone(),
            voucher: channel.voucher(charged),
            amount: Some(amount.to_string()),
            refund_nonce: Some(nonce.to_string()),
            claims: Some(vec![channel.claim(charged, charged)]),
            refund_authorizer_signature: None,
            claim_authorizer_signature: None,
        })
        .unwrap();
        payment
    };
    let refunded = sandbox.settle(&complete(10_000, 0), &accept).await;
    assert!(refunded.success, "{refunded:?}");
    assert_eq!(refunded.amount, "10000");
    assert_eq!(refunded.payer.as_deref(), Some(payer.as_str()));
    let state = refunded.channel_state().unwrap();
    assert_eq!(
        (
            state.balance.as_str(),
            state.total_claimed.as_str(),
            state.refund_nonce.as_str()
        ),
        ("40000", "3000", "1")
    );
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE - 50_000 + 10_000);

    // The same completed refund again: its nonce is spent.
    let replayed = sandbox.settle(&complete(10_000, 0), &accept).await;
    assert_eq!(
        replayed.error_reason.as_deref(),
        Some(reason::REFUND_SIMULATION_FAILED)
    );
    assert!(
        replayed
            .error_message
            .unwrap()
            .contains("InvalidRefundNonce")
    );

    // The rest: 37,000; the charged 3,000 stay claimed for the receiver.
    let full = sandbox.settle(&complete(37_000, 1), &accept).await;
    assert!(full.success, "{full:?}");
    assert_eq!(full.amount, "37000");
    let state = full.channel_state().unwrap();
    assert_eq!(
        (state.balance.as_str(), state.refund_nonce.as_str()),
        ("3000", "2")
    );
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE - 3_000);
    let nothing = sandbox.settle(&complete(1, 2), &accept).await;
    assert_eq!(
        nothing.error_reason.as_deref(),
        Some(reason::REFUND_NO_BALANCE)
    );

    // A direct refund by the receiver with nothing unclaimed moves nothing but spends a nonce.
    let moved = sandbox
        .facilitator
        .refund_directly(&network(), &channel.config, 1, PAY_TO)
        .unwrap();
    assert_eq!(moved, 0);
    assert_eq!(channel.state(&sandbox).refund_nonce, 3);
    let nonce = refundNonceCall::abi_decode_returns(
        &sandbox
            .call(
                refundNonceCall {
                    channelId: channel.id(),
                }
                .abi_encode(),
            )
            .await,
    )
    .unwrap();
    assert_eq!(nonce, U256::from(3));
    // Only the receiver side may refund directly.
    let refused = sandbox
        .facilitator
        .refund_directly(&network(), &channel.config, 1, &payer);
    assert_eq!(
        refused,
        Err(ChannelError::Reverted("NotAuthorizedToRefund".into()))
    );

    assert!(sandbox.sweep().await.success);
    assert_eq!(sandbox.balance(PAY_TO), STARTING_BALANCE + 3_000);
}

#[tokio::test]
async fn a_server_owned_authorizer_signs_the_refund_itself() {
    let sandbox = Sandbox::start().await;
    let server = SandboxWallet::random();
    let accept = accept(&server.address());
    let channel = Channel::new(&accept);
    channel.open(&sandbox, 20_000).await;
    let completed = |refund_signature: Option<String>| {
        let claims = vec![channel.claim(PRICE, PRICE)];
        let claim_signature = server.sign_claim_batch(&network(), &claims).unwrap();
        let mut payment = channel
            .wallet
            .refund_payment(&accept, &channel.config, PRICE, None)
            .unwrap();
        payment.payload = serde_json::value::to_raw_value(&BatchPayload::Refund {
            channel_config: channel.config.clone(),
            voucher: channel.voucher(PRICE),
            amount: Some("19000".into()),
            refund_nonce: Some("0".into()),
            claims: Some(claims),
            refund_authorizer_signature: refund_signature,
            claim_authorizer_signature: Some(claim_signature),
        })
        .unwrap();
        payment
    };
    let refused = sandbox.settle(&completed(None), &accept).await;
    assert_eq!(
        refused.error_reason.as_deref(),
        Some(reason::AUTHORIZER_ADDRESS_MISMATCH)
    );
    let wrong_amount = server
        .sign_refund(&network(), &channel.id, 0, 18_000)
        .unwrap();
    let refused = sandbox
        .settle(&completed(Some(wrong_amount)), &accept)
        .await;
    assert!(refused.error_message.unwrap().contains("InvalidSignature"));
    let signature = server
        .sign_refund(&network(), &channel.id, 0, 19_000)
        .unwrap();
    let refunded = sandbox.settle(&completed(Some(signature)), &accept).await;
    assert!(refunded.success, "{refunded:?}");
    assert_eq!(refunded.amount, "19000");
    let state = channel.state(&sandbox);
    assert_eq!(
        (state.balance, state.total_claimed, state.refund_nonce),
        (1_000, 1_000, 1)
    );
}

#[tokio::test]
async fn a_refund_reduces_a_pending_withdrawal() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    let payer = channel.wallet.address();
    channel.open(&sandbox, 10_000).await;
    sandbox
        .facilitator
        .initiate_withdraw(&network(), &channel.config, 6_000, &payer)
        .unwrap();
    let receiver_authorizer = sandbox.facilitator.receiver_authorizer();
    let refunded = sandbox
        .facilitator
        .refund_directly(&network(), &channel.config, 4_000, &receiver_authorizer)
        .unwrap();
    assert_eq!(refunded, 4_000);
    assert_eq!(channel.state(&sandbox).pending_withdrawal, 2_000);
    sandbox
        .facilitator
        .refund_directly(&network(), &channel.config, 2_000, &receiver_authorizer)
        .unwrap();
    let state = channel.state(&sandbox);
    assert_eq!(
        (state.pending_withdrawal, state.withdraw_requested_at),
        (0, 0),
        "cancelled"
    );
}
