//! `/supported`, and deposits: checked before anything moves, ERC-3009 and Permit2, a smart
//! wallet payer through EIP-1271, the in-process facilitator.

use crate::support::*;

#[tokio::test]
async fn supported_lists_batch_settlement_with_the_facilitators_receiver_authorizer() {
    let sandbox = Sandbox::start().await;
    let supported: Value = sandbox
        .http
        .get(format!("{}/supported", sandbox.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kinds: Vec<&Value> = supported["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|kind| kind["scheme"] == "batch-settlement")
        .collect();
    let networks: Vec<&str> = kinds
        .iter()
        .map(|kind| kind["network"].as_str().unwrap())
        .collect();
    assert_eq!(networks, ["eip155:8453", "eip155:84532"]);
    for kind in kinds {
        assert_eq!(kind["x402Version"], 2);
        assert_eq!(
            kind["extra"]["receiverAuthorizer"],
            sandbox.facilitator.receiver_authorizer()
        );
    }
}

#[tokio::test]
async fn deposits_are_checked_before_anything_moves() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    let payer = channel.wallet.address();
    let settle_reason = |answer: BatchSettleResponse| answer.error_reason.unwrap_or_default();

    // More than the payer holds.
    sandbox
        .facilitator
        .set_balance(&payer, AtomicAmount(5_000))
        .unwrap();
    let payment = channel
        .wallet
        .deposit_payment_at(&accept, &channel.config, 6_000, PRICE, sandbox.now())
        .unwrap();
    assert_eq!(
        sandbox
            .verify(&payment, &accept)
            .await
            .invalid_reason
            .as_deref(),
        Some(reason::INSUFFICIENT_BALANCE)
    );
    assert_eq!(
        settle_reason(sandbox.settle(&payment, &accept).await),
        reason::INSUFFICIENT_BALANCE
    );
    // A first voucher above the deposit.
    let payment = channel
        .wallet
        .deposit_payment_at(&accept, &channel.config, 4_000, 4_001, sandbox.now())
        .unwrap();
    assert_eq!(
        sandbox
            .verify(&payment, &accept)
            .await
            .invalid_reason
            .as_deref(),
        Some(reason::CUMULATIVE_EXCEEDS_BALANCE)
    );
    // An expired authorization.
    let payment = channel
        .wallet
        .deposit_payment_at(
            &accept,
            &channel.config,
            4_000,
            PRICE,
            sandbox.now() - 3_600,
        )
        .unwrap();
    assert_eq!(
        sandbox
            .verify(&payment, &accept)
            .await
            .invalid_reason
            .as_deref(),
        Some(reason::VALID_BEFORE)
    );
    // A channel for another receiver authorizer or another delay than the 402's.
    let other = super_accept(&SandboxWallet::random().address(), DELAY);
    let payment = channel
        .wallet
        .deposit_payment_at(&other, &channel.config, 4_000, PRICE, sandbox.now())
        .unwrap();
    assert_eq!(
        sandbox
            .verify(&payment, &other)
            .await
            .invalid_reason
            .as_deref(),
        Some(reason::RECEIVER_AUTHORIZER_MISMATCH)
    );
    let longer = super_accept(&sandbox.facilitator.receiver_authorizer(), 2 * DELAY);
    let payment = channel
        .wallet
        .deposit_payment_at(&longer, &channel.config, 4_000, PRICE, sandbox.now())
        .unwrap();
    assert_eq!(
        sandbox
            .verify(&payment, &longer)
            .await
            .invalid_reason
            .as_deref(),
        Some(reason::WITHDRAW_DELAY_MISMATCH)
    );
    // A voucher payment before any deposit: there is no channel.
    let voucher = channel
        .wallet
        .voucher_payment(&accept, &channel.config, PRICE)
        .unwrap();
    assert_eq!(
        sandbox
            .verify(&voucher, &accept)
            .await
            .invalid_reason
            .as_deref(),
        Some(reason::CHANNEL_NOT_FOUND)
    );
    // A voucher is never settled on its own.
    assert_eq!(
        settle_reason(sandbox.settle(&voucher, &accept).await),
        reason::PAYLOAD_TYPE
    );
    assert_eq!(sandbox.balance(&payer), 5_000);
    assert_eq!(channel.state(&sandbox).balance, 0);
}

#[tokio::test]
async fn a_permit2_deposit_is_pulled_once_and_its_permit_checked() {
    let sandbox = Sandbox::start().await;
    let mut accept = accept(&sandbox.facilitator.receiver_authorizer());
    if let Some(extra) = accept.extra.as_mut() {
        extra.insert("assetTransferMethod".into(), json!("permit2"));
    }
    let channel = Channel::new(&accept);
    let payer = channel.wallet.address();
    let payment = channel
        .wallet
        .deposit_payment_at(&accept, &channel.config, 40_000, PRICE, sandbox.now())
        .unwrap();
    let BatchPayload::Deposit { deposit, .. } =
        serde_json::from_str::<BatchPayload>(payment.payload.get()).unwrap()
    else {
        panic!("a deposit");
    };
    let permit = deposit.authorization.permit2_authorization.clone().unwrap();
    assert!(deposit.authorization.erc3009_authorization.is_none());
    assert_eq!(permit.witness.channel_id, channel.id);

    // Each tampered field is refused with its reason, before anything moves.
    let tampered = |edit: &dyn Fn(&mut tower_x402_sandbox::batch::Permit2Deposit)| {
        let mut deposit = deposit.clone();
        edit(
            deposit
                .authorization
                .permit2_authorization
                .as_mut()
                .unwrap(),
        );
        let mut payment = payment.clone();
        payment.payload = serde_json::value::to_raw_value(&BatchPayload::Deposit {
            channel_config: channel.config.clone(),
            voucher: channel.voucher(PRICE),
            deposit,
        })
        .unwrap();
        payment
    };
    let cases: [(
        &dyn Fn(&mut tower_x402_sandbox::batch::Permit2Deposit),
        &str,
    ); 4] = [
        (
            &|permit| permit.spender = PAY_TO.into(),
            reason::PERMIT2_INVALID_SPENDER,
        ),
        (
            &|permit| permit.permitted.amount = "40001".into(),
            reason::PERMIT2_AMOUNT_MISMATCH,
        ),
        (
            &|permit| permit.deadline = (START - 1).to_string(),
            reason::PERMIT2_DEADLINE_EXPIRED,
        ),
        (
            &|permit| permit.nonce = "7".into(),
            reason::PERMIT2_INVALID_SIGNATURE,
        ),
    ];
    for (edit, expected) in cases {
        let refused = sandbox.verify(&tampered(edit), &accept).await;
        assert_eq!(refused.invalid_reason.as_deref(), Some(expected));
        let refused = sandbox.settle(&tampered(edit), &accept).await;
        assert_eq!(refused.error_reason.as_deref(), Some(expected));
    }
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE);

    let verified = sandbox.verify(&payment, &accept).await;
    assert!(verified.is_valid, "{verified:?}");
    let settled = sandbox.settle(&payment, &accept).await;
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.amount, "40000");
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE - 40_000);
    assert_eq!(channel.state(&sandbox).balance, 40_000);
    let again = sandbox.settle(&payment, &accept).await;
    assert_eq!(
        again.error_reason.as_deref(),
        Some(reason::DEPOSIT_SIMULATION_FAILED)
    );
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE - 40_000);
}

#[tokio::test]
async fn a_smart_wallet_payer_signs_through_eip_1271() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let owner = SandboxWallet::random();
    let wallet = sandbox
        .facilitator
        .deploy_contract_wallet(&owner.address())
        .unwrap();
    let mut config = owner.channel_config(&accept, [7; 32]).unwrap();
    config.payer = wallet.clone();
    config.payer_authorizer = Address::ZERO.to_checksum(None);
    let id = SandboxWallet::channel_id(&config, &network()).unwrap();

    let payment = owner
        .deposit_payment_at(&accept, &config, 10_000, PRICE, sandbox.now())
        .unwrap();
    let verified = sandbox.verify(&payment, &accept).await;
    assert!(verified.is_valid, "{verified:?}");
    assert!(sandbox.settle(&payment, &accept).await.success);
    assert_eq!(sandbox.balance(&wallet), STARTING_BALANCE - 10_000);

    let voucher = owner.voucher_payment(&accept, &config, 2 * PRICE).unwrap();
    assert!(sandbox.verify(&voucher, &accept).await.is_valid);
    let stranger = SandboxWallet::random()
        .voucher_payment(&accept, &config, 2 * PRICE)
        .unwrap();
    let refused = sandbox.verify(&stranger, &accept).await;
    assert_eq!(
        refused.invalid_reason.as_deref(),
        Some(reason::VOUCHER_SIGNATURE)
    );
    let signed = owner.sign_voucher(&network(), &id, 2 * PRICE).unwrap();
    let claimed = sandbox
        .claim(vec![VoucherClaim::new(&config, &signed, 1_500)], None)
        .await;
    assert!(claimed.success, "{claimed:?}");
}

#[tokio::test]
async fn the_in_process_facilitator_answers_batch_settlement_too() {
    use tower_x402::Facilitator as _;
    use x402_wire::FacilitatorRequest;

    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    let payment = channel
        .wallet
        .deposit_payment_at(&accept, &channel.config, 10_000, PRICE, sandbox.now())
        .unwrap();
    let request = FacilitatorRequest::new(payment, accept.clone());
    let verified = sandbox.facilitator.verify(&request).await.unwrap();
    assert!(verified.is_valid, "{verified:?}");
    let settled = sandbox.facilitator.settle(&request).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.amount, Some(AtomicAmount(10_000)));
    let again = sandbox.facilitator.settle(&request).await.unwrap();
    assert_eq!(
        again.error_reason.as_deref(),
        Some(reason::DEPOSIT_SIMULATION_FAILED)
    );
}
