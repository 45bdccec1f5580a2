//! Claims and sweeps: one deposit then twenty vouchers claimed in one batch and swept; claims
//! beyond the balance or the ceiling, or forged, refused and stale ones changing nothing; the
//! receiver-authorizer rule; several channels in one claim; a lost claim answer.

use crate::support::*;

#[tokio::test]
async fn one_deposit_then_twenty_vouchers_claimed_in_one_batch_and_swept() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    let payer = channel.wallet.address();

    // The deposit's /verify shows the empty channel; its /settle the funded one.
    let payment = channel
        .wallet
        .deposit_payment_at(&accept, &channel.config, 100_000, PRICE, sandbox.now())
        .unwrap();
    let verified = sandbox.verify(&payment, &accept).await;
    assert!(verified.is_valid, "{verified:?}");
    assert_eq!(verified.payer.as_deref(), Some(payer.as_str()));
    let before = verified.extra.unwrap();
    assert_eq!(
        (before.channel_id.as_str(), before.balance.as_str()),
        (channel.id.as_str(), "0")
    );
    let deposited = sandbox.settle(&payment, &accept).await;
    assert!(deposited.success, "{deposited:?}");
    assert_eq!(deposited.amount, "100000");
    assert_eq!(deposited.transaction.len(), 66);
    let state = deposited.channel_state().unwrap();
    assert_eq!(
        (state.balance.as_str(), state.total_claimed.as_str()),
        ("100000", "0")
    );
    assert_eq!(
        (state.withdraw_requested_at, state.refund_nonce.as_str()),
        (0, "0")
    );
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE - 100_000);
    assert_eq!(
        sandbox.balance(&BATCH_SETTLEMENT.to_checksum(None)),
        100_000
    );

    // The same deposit again: its authorization nonce is spent.
    let again = sandbox.settle(&payment, &accept).await;
    assert_eq!(
        again.error_reason.as_deref(),
        Some(reason::DEPOSIT_SIMULATION_FAILED)
    );
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE - 100_000);

    // Twenty paid requests, each a voucher for the cumulative ceiling; the server charged 700 of
    // each 1,000 after the first.
    let mut charged = PRICE;
    let mut latest = None;
    for _ in 0..20 {
        let ceiling = charged + PRICE;
        let voucher = channel
            .wallet
            .voucher_payment(&accept, &channel.config, ceiling)
            .unwrap();
        let verified = sandbox.verify(&voucher, &accept).await;
        assert!(verified.is_valid, "{verified:?}");
        assert_eq!(verified.extra.unwrap().balance, "100000");
        charged += 700;
        latest = Some((ceiling, charged));
    }
    let (ceiling, charged) = latest.unwrap();
    assert_eq!((ceiling, charged), (15_300, 15_000));
    assert_eq!(
        channel.state(&sandbox).total_claimed,
        0,
        "vouchers move nothing"
    );

    // One claim of the latest voucher, signed by the facilitator's key; then one sweep.
    let claimed = sandbox
        .claim(vec![channel.claim(ceiling, charged)], None)
        .await;
    assert!(claimed.success, "{claimed:?}");
    assert_eq!(claimed.amount, "", "a claim moves no tokens");
    assert_eq!(channel.state(&sandbox).total_claimed, charged);
    assert_eq!(sandbox.balance(PAY_TO), STARTING_BALANCE);
    let swept = sandbox.sweep().await;
    assert!(swept.success, "{swept:?}");
    assert_eq!(swept.amount, charged.to_string());
    assert_eq!(sandbox.balance(PAY_TO), STARTING_BALANCE + charged);
    assert_eq!(
        sandbox.balance(&BATCH_SETTLEMENT.to_checksum(None)),
        100_000 - charged
    );
    let nothing = sandbox.sweep().await;
    assert_eq!(
        nothing.error_reason.as_deref(),
        Some(reason::NOTHING_TO_SETTLE)
    );
    assert_eq!(sandbox.balance(PAY_TO), STARTING_BALANCE + charged);

    // The views over JSON-RPC.
    let views = sandbox
        .call(
            channelsCall {
                channelId: channel.id(),
            }
            .abi_encode(),
        )
        .await;
    let views = channelsCall::abi_decode_returns(&views).unwrap();
    assert_eq!((views.balance, views.totalClaimed), (100_000, charged));
    let totals = receiversCall {
        receiver: PAY_TO.parse().unwrap(),
        token: usdc().asset.parse().unwrap(),
    };
    let totals =
        receiversCall::abi_decode_returns(&sandbox.call(totals.abi_encode()).await).unwrap();
    assert_eq!(
        (totals.totalClaimed, totals.totalSettled),
        (charged, charged)
    );
}

#[tokio::test]
async fn claims_beyond_the_balance_or_the_ceiling_or_forged_are_refused_and_stale_ones_change_nothing()
 {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    channel.open(&sandbox, 10_000).await;

    // Beyond the balance: /verify refuses the voucher, the contract the claim.
    let beyond = channel
        .wallet
        .voucher_payment(&accept, &channel.config, 12_000)
        .unwrap();
    let refused = sandbox.verify(&beyond, &accept).await;
    assert_eq!(
        refused.invalid_reason.as_deref(),
        Some(reason::CUMULATIVE_EXCEEDS_BALANCE)
    );
    let refused = sandbox
        .claim(vec![channel.claim(12_000, 12_000)], None)
        .await;
    assert_eq!(
        refused.error_reason.as_deref(),
        Some(reason::CLAIM_SIMULATION_FAILED)
    );
    assert!(
        refused
            .error_message
            .unwrap()
            .contains("ClaimExceedsBalance")
    );
    // Above the voucher's ceiling.
    let refused = sandbox.claim(vec![channel.claim(4_000, 5_000)], None).await;
    assert!(
        refused
            .error_message
            .unwrap()
            .contains("ClaimExceedsCeiling")
    );

    // A voucher signed by another key: refused by /verify and by the claim.
    let thief = SandboxWallet::random();
    let forged = thief.sign_voucher(&network(), &channel.id, 5_000).unwrap();
    let mut payment = channel
        .wallet
        .voucher_payment(&accept, &channel.config, 5_000)
        .unwrap();
    payment.payload = serde_json::value::to_raw_value(&BatchPayload::Voucher {
        channel_config: channel.config.clone(),
        voucher: forged.clone(),
    })
    .unwrap();
    let refused = sandbox.verify(&payment, &accept).await;
    assert_eq!(
        refused.invalid_reason.as_deref(),
        Some(reason::VOUCHER_SIGNATURE)
    );
    let refused = sandbox
        .claim(
            vec![VoucherClaim::new(&channel.config, &forged, 5_000)],
            None,
        )
        .await;
    assert!(refused.error_message.unwrap().contains("InvalidSignature"));
    // A tampered configuration no longer hashes to the channel id.
    let mut tampered = channel.config.clone();
    tampered.receiver = thief.address();
    payment.payload = serde_json::value::to_raw_value(&BatchPayload::Voucher {
        channel_config: tampered,
        voucher: channel.voucher(5_000),
    })
    .unwrap();
    let refused = sandbox.verify(&payment, &accept).await;
    assert_eq!(
        refused.invalid_reason.as_deref(),
        Some(reason::CHANNEL_ID_MISMATCH)
    );
    // A claim batch signature by someone other than the receiver authorizer.
    let signature = thief
        .sign_claim_batch(&network(), &[channel.claim(5_000, 5_000)])
        .unwrap();
    let refused = sandbox
        .claim(vec![channel.claim(5_000, 5_000)], Some(signature))
        .await;
    assert!(refused.error_message.unwrap().contains("InvalidSignature"));
    assert_eq!(
        channel.state(&sandbox).total_claimed,
        0,
        "nothing refused changed anything"
    );

    // A batch is all or nothing: one bad row and the good one is not applied either.
    let mixed = vec![
        channel.claim(5_000, 5_000),
        VoucherClaim::new(&channel.config, &forged, 6_000),
    ];
    assert!(!sandbox.claim(mixed, None).await.success);
    assert_eq!(channel.state(&sandbox).total_claimed, 0);

    // Claims are monotonic: a lower total after a higher one is a no-op.
    assert!(
        sandbox
            .claim(vec![channel.claim(5_000, 5_000)], None)
            .await
            .success
    );
    let stale = sandbox.claim(vec![channel.claim(3_000, 3_000)], None).await;
    assert!(
        stale.success,
        "the contract ignores a total at or below the claimed one"
    );
    assert_eq!(channel.state(&sandbox).total_claimed, 5_000);
    let replayed = sandbox.claim(vec![channel.claim(5_000, 5_000)], None).await;
    assert!(replayed.success);
    let totals = sandbox
        .facilitator
        .receiver_totals(&network(), PAY_TO, usdc().asset)
        .unwrap();
    assert_eq!(totals, (5_000, 0), "claimed once, never twice");
    // And a voucher at or below what was claimed no longer verifies.
    let old = channel
        .wallet
        .voucher_payment(&accept, &channel.config, 5_000)
        .unwrap();
    let refused = sandbox.verify(&old, &accept).await;
    assert_eq!(
        refused.invalid_reason.as_deref(),
        Some(reason::CUMULATIVE_BELOW_CLAIMED)
    );
}

#[tokio::test]
async fn claims_follow_the_receiver_authorizer_rule() {
    let sandbox = Sandbox::start().await;
    // A server that owns its receiver-authorizer key.
    let server = SandboxWallet::random();
    let accept = accept(&server.address());
    let channel = Channel::new(&accept);
    channel.open(&sandbox, 10_000).await;

    // Without the server's signature the facilitator cannot sign for a key it does not hold.
    let refused = sandbox.claim(vec![channel.claim(3_000, 2_500)], None).await;
    assert_eq!(
        refused.error_reason.as_deref(),
        Some(reason::AUTHORIZER_ADDRESS_MISMATCH)
    );
    // A signature over other totals than those submitted does not authorize them.
    let signature = server
        .sign_claim_batch(&network(), &[channel.claim(3_000, 2_000)])
        .unwrap();
    let refused = sandbox
        .claim(vec![channel.claim(3_000, 2_500)], Some(signature))
        .await;
    assert!(refused.error_message.unwrap().contains("InvalidSignature"));
    // The server's own signature over the batch.
    let signature = server
        .sign_claim_batch(&network(), &[channel.claim(3_000, 2_500)])
        .unwrap();
    let claimed = sandbox
        .claim(vec![channel.claim(3_000, 2_500)], Some(signature))
        .await;
    assert!(claimed.success, "{claimed:?}");
    assert_eq!(channel.state(&sandbox).total_claimed, 2_500);

    // One batch, one receiver authorizer: a row of a channel the facilitator authorizes does
    // not ride on the server's signature, and the facilitator does not sign for the server's.
    let delegated = Channel::new(&super_accept(
        &sandbox.facilitator.receiver_authorizer(),
        DELAY,
    ));
    delegated.open(&sandbox, 10_000).await;
    let rows = vec![channel.claim(4_000, 4_000), delegated.claim(PRICE, PRICE)];
    let signature = server.sign_claim_batch(&network(), &rows).unwrap();
    let refused = sandbox.claim(rows.clone(), Some(signature)).await;
    assert!(
        refused
            .error_message
            .unwrap()
            .contains("NotReceiverAuthorizer")
    );
    let refused = sandbox.claim(rows, None).await;
    assert_eq!(
        refused.error_reason.as_deref(),
        Some(reason::AUTHORIZER_ADDRESS_MISMATCH)
    );
    assert_eq!(channel.state(&sandbox).total_claimed, 2_500);
    assert_eq!(delegated.state(&sandbox).total_claimed, 0);
}

#[tokio::test]
async fn several_channels_are_claimed_in_one_settle_and_swept_in_one() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channels: Vec<Channel> = (0..3).map(|_| Channel::new(&accept)).collect();
    for channel in &channels {
        channel.open(&sandbox, 30_000).await;
    }
    let claims: Vec<VoucherClaim> = channels
        .iter()
        .zip([4_000u128, 9_000, 1_000])
        .map(|(channel, total)| channel.claim(total, total))
        .collect();
    let claimed = sandbox.claim(claims, None).await;
    assert!(claimed.success, "{claimed:?}");
    for (channel, total) in channels.iter().zip([4_000u128, 9_000, 1_000]) {
        assert_eq!(channel.state(&sandbox).total_claimed, total);
    }
    let swept = sandbox.sweep().await;
    assert_eq!(swept.amount, "14000");
    assert_eq!(sandbox.balance(PAY_TO), STARTING_BALANCE + 14_000);
    assert_eq!(
        sandbox.balance(&BATCH_SETTLEMENT.to_checksum(None)),
        90_000 - 14_000
    );
}

#[tokio::test]
async fn a_claim_whose_answer_is_lost_happened_and_sending_it_again_claims_nothing_twice() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    channel.open(&sandbox, 10_000).await;

    sandbox
        .facilitator
        .queue_settle(tower_x402_sandbox::Step::AnswerLost);
    let mut requirements = accept.clone();
    requirements.amount = AtomicAmount(0);
    let claim = BatchPayload::Claim {
        claims: vec![channel.claim(3_000, 2_000)],
        claim_authorizer_signature: None,
    };
    let body = json!({
        "x402Version": 2,
        "paymentPayload": {"x402Version": 2, "accepted": requirements, "payload": claim},
        "paymentRequirements": requirements,
    });
    let lost = sandbox
        .http
        .post(format!("{}/settle", sandbox.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(lost.status(), 504);
    // The chain shows the claim; the same claim again is a no-op.
    let views = sandbox
        .call(
            channelsCall {
                channelId: channel.id(),
            }
            .abi_encode(),
        )
        .await;
    assert_eq!(
        channelsCall::abi_decode_returns(&views)
            .unwrap()
            .totalClaimed,
        2_000
    );
    assert!(
        sandbox.post("/settle", &body).await["success"]
            .as_bool()
            .unwrap()
    );
    let totals = sandbox
        .facilitator
        .receiver_totals(&network(), PAY_TO, usdc().asset)
        .unwrap();
    assert_eq!(totals, (2_000, 0));
}

#[tokio::test]
async fn a_pending_answer_either_ran_the_claim_or_did_not_as_the_script_says() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    channel.open(&sandbox, 10_000).await;

    sandbox
        .facilitator
        .queue_settle(tower_x402_sandbox::Step::Pending);
    let pending = sandbox.claim(vec![channel.claim(3_000, 1_000)], None).await;
    assert_eq!(pending.error_reason.as_deref(), Some("settlement_pending"));
    assert_eq!(channel.state(&sandbox).total_claimed, 0, "nothing ran");

    sandbox
        .facilitator
        .queue_settle(tower_x402_sandbox::Step::PendingThenSettled);
    let pending = sandbox.claim(vec![channel.claim(3_000, 2_000)], None).await;
    assert_eq!(pending.error_reason.as_deref(), Some("settlement_pending"));
    assert_eq!(pending.transaction.len(), 66);
    assert_eq!(
        channel.state(&sandbox).total_claimed,
        2_000,
        "the claim ran"
    );
}
