//! Timed withdrawals: only after the delay, and a claim before it wins.

use crate::support::*;

#[tokio::test]
async fn a_withdrawal_completes_only_after_its_delay_and_a_claim_before_it_wins() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    let payer = channel.wallet.address();
    channel.open(&sandbox, 20_000).await;

    let started = sandbox.now();
    sandbox
        .facilitator
        .initiate_withdraw(&network(), &channel.config, 20_000, &payer)
        .unwrap();
    // Only the payer side may start one, once.
    let refused = sandbox
        .facilitator
        .initiate_withdraw(&network(), &channel.config, 1, PAY_TO);
    assert_eq!(
        refused,
        Err(ChannelError::Reverted("InvalidChannel".into()))
    );
    let refused = sandbox
        .facilitator
        .initiate_withdraw(&network(), &channel.config, 1, &payer);
    assert_eq!(
        refused,
        Err(ChannelError::Reverted("WithdrawalAlreadyPending".into()))
    );

    // A server watching the chain sees it, through eth_call and in /verify's snapshot.
    let pending = pendingWithdrawalsCall::abi_decode_returns(
        &sandbox
            .call(
                pendingWithdrawalsCall {
                    channelId: channel.id(),
                }
                .abi_encode(),
            )
            .await,
    )
    .unwrap();
    assert_eq!(
        (pending.amount, pending.initiatedAt.to::<u64>()),
        (20_000, started)
    );
    let voucher = channel
        .wallet
        .voucher_payment(&accept, &channel.config, 8_000)
        .unwrap();
    let verified = sandbox.verify(&voucher, &accept).await;
    assert_eq!(verified.extra.unwrap().withdraw_requested_at, started);

    // Not before the delay.
    sandbox.advance(DELAY - 1);
    let early = sandbox
        .facilitator
        .finalize_withdraw(&network(), &channel.config, &payer);
    assert_eq!(
        early,
        Err(ChannelError::Reverted("WithdrawDelayNotElapsed".into()))
    );
    // The server claims in time.
    let claimed = sandbox.claim(vec![channel.claim(8_000, 7_500)], None).await;
    assert!(claimed.success, "{claimed:?}");

    sandbox.advance(1);
    let withdrawn = sandbox
        .facilitator
        .finalize_withdraw(&network(), &channel.config, &payer)
        .unwrap();
    assert_eq!(withdrawn, 20_000 - 7_500, "capped by what is unclaimed");
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE - 7_500);
    let state = channel.state(&sandbox);
    assert_eq!(
        (
            state.balance,
            state.total_claimed,
            state.withdraw_requested_at
        ),
        (7_500, 7_500, 0)
    );
    let swept = sandbox.sweep().await;
    assert_eq!(swept.amount, "7500");
    assert_eq!(sandbox.balance(&BATCH_SETTLEMENT.to_checksum(None)), 0);

    // A channel whose server did not claim in time: the late claim finds no balance.
    let late = Channel::new(&accept);
    late.open(&sandbox, 5_000).await;
    let payer = late.wallet.address();
    sandbox
        .facilitator
        .initiate_withdraw(&network(), &late.config, 5_000, &payer)
        .unwrap();
    sandbox.advance(DELAY);
    assert_eq!(
        sandbox
            .facilitator
            .finalize_withdraw(&network(), &late.config, &payer),
        Ok(5_000)
    );
    let refused = sandbox.claim(vec![late.claim(PRICE, PRICE)], None).await;
    assert!(
        refused
            .error_message
            .unwrap()
            .contains("ClaimExceedsBalance")
    );
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE);
}
