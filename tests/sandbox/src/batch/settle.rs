//! `/settle` of `batch-settlement`: deposits, claims of many channels in one call, sweeps, and
//! server-completed refunds (their claims and the refund in one call), on the simulated
//! contract, signing with the facilitator's receiver-authorizer key where the channel names it.

use alloy_primitives::{Address, B256};
use serde_json::{Map, json};
use x402_wire::FacilitatorRequest;

use super::contract::{Authority, ClaimRow};
use super::parse::{parse_amount, sign, typed_config};
use super::reason;
use super::typed::{self, ChannelConfig};
use super::verify::{Request, channel_of};
use super::wire::{BatchPayload, BatchSettleResponse, ChannelSnapshot, VoucherClaim};
use crate::SandboxFacilitator;
use crate::eip712::{parse_address, parse_decimal};
use crate::verify::Rejection;

impl SandboxFacilitator {
    /// `/settle` of a `batch-settlement` payload without the HTTP: a deposit (verified again,
    /// then pulled into the channel), `type: "claim"` (claims of many channels in one call),
    /// `type: "settle"` (the sweep of a receiver's claimed funds) or a refund completed by the
    /// server (its claims and the refund in one call). Without an authorizer signature the
    /// facilitator signs with its own receiver-authorizer key, which it can only do for channels
    /// naming that key.
    ///
    /// ```
    /// use x402_wire::{
    ///     AtomicAmount, FacilitatorRequest, PaymentPayload, PaymentRequirements, UsdcDeployment,
    /// };
    /// use tower_x402_sandbox::batch::{BatchPayload, VoucherClaim};
    /// use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
    ///
    /// let facilitator = SandboxFacilitator::new().with_clock(|| 1_750_000_000);
    /// let usdc = &UsdcDeployment::BASE_SEPOLIA;
    /// let mut extra = usdc.eip712.map(|domain| domain.to_extra()).unwrap_or_default();
    /// extra.insert("receiverAuthorizer".into(), facilitator.receiver_authorizer().into());
    /// extra.insert("withdrawDelay".into(), 900.into());
    /// let accept = PaymentRequirements {
    ///     scheme: "batch-settlement".into(),
    ///     network: usdc.network.clone(),
    ///     amount: AtomicAmount(1_000),
    ///     asset: usdc.asset.into(),
    ///     pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
    ///     max_timeout_seconds: 3600,
    ///     extra: Some(extra),
    /// };
    /// let buyer = SandboxWallet::random();
    /// let config = buyer.channel_config(&accept, [1; 32])?;
    ///
    /// // One deposit of 0.05 USDC with the first request's voucher.
    /// let deposit = buyer.deposit_payment_at(&accept, &config, 50_000, 1_000, facilitator.now())?;
    /// let opened = facilitator.settle_batch(&FacilitatorRequest::new(deposit, accept.clone()));
    /// assert_eq!(opened.channel_state().unwrap().balance, "50000");
    ///
    /// // Later, the server claims what it charged under the latest voucher, then sweeps.
    /// let id = SandboxWallet::channel_id(&config, &accept.network)?;
    /// let voucher = buyer.sign_voucher(&accept.network, &id, 3_000)?;
    /// let server_side = |payload: &BatchPayload| {
    ///     let mut requirements = accept.clone();
    ///     requirements.amount = AtomicAmount(0);
    ///     let payment: PaymentPayload = serde_json::from_value(serde_json::json!({
    ///         "x402Version": 2, "accepted": requirements, "payload": payload,
    ///     }))?;
    ///     Ok::<_, serde_json::Error>(facilitator.settle_batch(&FacilitatorRequest::new(payment, requirements)))
    /// };
    /// let claims = vec![VoucherClaim::new(&config, &voucher, 2_500)];
    /// assert!(server_side(&BatchPayload::Claim { claims, claim_authorizer_signature: None })?.success);
    /// let swept = server_side(&BatchPayload::Settle { receiver: accept.pay_to.clone(), token: accept.asset.clone() })?;
    /// assert_eq!(swept.amount, "2500");
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// ```
    pub fn settle_batch(&self, request: &FacilitatorRequest) -> BatchSettleResponse {
        let network = request.payment_requirements().network.to_string();
        match self
            .batch_request(request)
            .and_then(|parsed| self.settle_parsed(&parsed))
        {
            Ok(mut response) => {
                response.network = network;
                response
            }
            Err(rejection) => BatchSettleResponse {
                success: false,
                error_reason: Some(rejection.reason.to_owned()),
                error_message: Some(rejection.message),
                transaction: String::new(),
                network,
                payer: rejection.payer,
                amount: String::new(),
                asset: None,
                extra: None,
            },
        }
    }

    fn settle_parsed(&self, request: &Request<'_>) -> Result<BatchSettleResponse, Rejection> {
        let network = &request.requirements.network;
        let owner = |address| self.wallet_owner(address);
        let env = self.env(network, &owner);
        let contract = &self.inner.batch.contract;
        match &request.payload {
            BatchPayload::Deposit {
                channel_config,
                voucher,
                deposit,
            } => {
                let verified = self.verify_parsed(request)?;
                let channel = channel_of(request, channel_config, voucher)?;
                let amount = parse_amount(&deposit.amount).unwrap_or_default();
                let pull = self.check_pull(request, &channel, deposit, amount)?;
                let receipt = contract
                    .deposit(&env, &channel.config, amount, &pull)
                    .map_err(|revert| {
                        Rejection::new(
                            reason::DEPOSIT_TRANSACTION_FAILED,
                            format!("deposit reverted: {revert}"),
                        )
                        .payer(Some(verified.payer.clone()))
                    })?;
                let (_, snapshot) = self.snapshot(network, channel.id);
                Ok(success(
                    receipt.transaction,
                    Some(verified.payer),
                    amount.to_string(),
                    Some(request.requirements.asset.clone()),
                    Some(snapshot),
                ))
            }
            BatchPayload::Voucher { .. } => Err(Rejection::new(
                reason::PAYLOAD_TYPE,
                "a voucher is not settled on its own: claim it with type `claim`",
            )),
            BatchPayload::Claim {
                claims,
                claim_authorizer_signature,
            } => {
                let rows = claim_rows(claims)?;
                let authority = self.authority(
                    &rows,
                    claim_authorizer_signature.as_deref(),
                    request.chain_id,
                    reason::CLAIM_PAYLOAD,
                )?;
                let receipt = contract.claim(&env, &rows, &authority).map_err(|revert| {
                    Rejection::new(
                        reason::CLAIM_SIMULATION_FAILED,
                        format!("claim reverted: {revert}"),
                    )
                })?;
                Ok(success(
                    receipt.transaction,
                    None,
                    String::new(),
                    None,
                    None,
                ))
            }
            BatchPayload::Settle { receiver, token } => {
                let address = |field: &str, text: &str| {
                    parse_address(text).ok_or_else(|| {
                        Rejection::new(
                            reason::SETTLE_PAYLOAD,
                            format!("{field} `{text}` is not an address"),
                        )
                    })
                };
                let receiver = address("receiver", receiver)?;
                let token = address("token", token)?;
                let totals = contract.receiver(network, receiver, token);
                if totals.total_claimed <= totals.total_settled {
                    return Err(Rejection::new(
                        reason::NOTHING_TO_SETTLE,
                        format!("nothing claimed and unsettled for {receiver} in {token}"),
                    ));
                }
                let receipt = contract.settle(&env, receiver, token).map_err(|revert| {
                    Rejection::new(
                        reason::NOTHING_TO_SETTLE,
                        format!("settle reverted: {revert}"),
                    )
                })?;
                Ok(success(
                    receipt.transaction,
                    None,
                    receipt.value.to_string(),
                    None,
                    None,
                ))
            }
            BatchPayload::Refund {
                channel_config,
                voucher,
                amount,
                refund_nonce,
                claims,
                refund_authorizer_signature,
                claim_authorizer_signature,
            } => {
                let channel = channel_of(request, channel_config, voucher)?;
                let payer = Some(channel.payer.clone());
                let reject = |code, text: String| Rejection::new(code, text).payer(payer.clone());
                let (Some(nonce), Some(claims), Some(amount)) = (refund_nonce, claims, amount)
                else {
                    return Err(reject(
                        reason::PAYLOAD_TYPE,
                        "a refund is settled once the server completed it with amount, refundNonce and claims".to_owned(),
                    ));
                };
                let requested = parse_amount(amount)
                    .filter(|amount| *amount > 0)
                    .ok_or_else(|| {
                        reject(
                            reason::REFUND_AMOUNT_INVALID,
                            format!("refund amount `{amount}` is not a positive decimal"),
                        )
                    })?;
                let nonce = parse_decimal(nonce).ok_or_else(|| {
                    reject(
                        reason::REFUND_PAYLOAD,
                        format!("refundNonce `{nonce}` is not a decimal"),
                    )
                })?;
                let rows = claim_rows(claims)?;
                let (escrow, _) = self.snapshot(network, channel.id);
                let claimed_after = rows
                    .iter()
                    .filter(|row| typed::channel_id(&row.config, request.chain_id) == channel.id)
                    .map(|row| row.total_claimed)
                    .fold(escrow.total_claimed, u128::max);
                if claimed_after == escrow.balance {
                    return Err(reject(
                        reason::REFUND_NO_BALANCE,
                        "nothing unclaimed remains to refund".to_owned(),
                    ));
                }
                let refund_authority = match refund_authorizer_signature {
                    Some(signature) => Authority::Signature(signature.clone()),
                    None => {
                        let key = self.own_authorizer(&[&channel.config])?;
                        let digest =
                            typed::refund_digest(channel.id, nonce, requested, request.chain_id);
                        Authority::Signature(sign(key, digest))
                    }
                };
                let claim_authority = if rows.is_empty() {
                    None
                } else {
                    Some(self.authority(
                        &rows,
                        claim_authorizer_signature.as_deref(),
                        request.chain_id,
                        reason::REFUND_PAYLOAD,
                    )?)
                };
                let claim = claim_authority
                    .as_ref()
                    .map(|authority| (rows.as_slice(), authority));
                let receipt = contract
                    .claim_and_refund(
                        &env,
                        claim,
                        &channel.config,
                        requested,
                        nonce,
                        &refund_authority,
                    )
                    .map_err(|revert| {
                        reject(
                            reason::REFUND_SIMULATION_FAILED,
                            format!("refund reverted: {revert}"),
                        )
                    })?;
                let (_, snapshot) = self.snapshot(network, channel.id);
                Ok(success(
                    receipt.transaction,
                    payer,
                    receipt.value.to_string(),
                    None,
                    Some(snapshot),
                ))
            }
        }
    }

    /// The claim batch's authority: the signature sent, or this facilitator's own when every row
    /// names its receiver-authorizer key.
    fn authority(
        &self,
        rows: &[ClaimRow],
        signature: Option<&str>,
        chain_id: u64,
        malformed: &'static str,
    ) -> Result<Authority, Rejection> {
        if rows.is_empty() {
            return Err(Rejection::new(malformed, "the claim batch is empty"));
        }
        if let Some(signature) = signature {
            return Ok(Authority::Signature(signature.to_owned()));
        }
        let configs: Vec<&ChannelConfig> = rows.iter().map(|row| &row.config).collect();
        let key = self.own_authorizer(&configs)?;
        let entries = rows
            .iter()
            .map(|row| typed::ClaimEntry {
                channelId: typed::channel_id(&row.config, chain_id),
                maxClaimableAmount: row.max_claimable,
                totalClaimed: row.total_claimed,
            })
            .collect();
        Ok(Authority::Signature(sign(
            key,
            typed::claim_batch_digest(entries, chain_id),
        )))
    }

    /// This facilitator's receiver-authorizer key, if every channel names it.
    fn own_authorizer(
        &self,
        configs: &[&ChannelConfig],
    ) -> Result<&k256::ecdsa::SigningKey, Rejection> {
        let key = &self.inner.batch.authorizer;
        let own = Address::from_private_key(key);
        match configs
            .iter()
            .find(|config| config.receiverAuthorizer != own)
        {
            None => Ok(key),
            Some(config) => Err(Rejection::new(
                reason::AUTHORIZER_ADDRESS_MISMATCH,
                format!(
                    "no authorizer signature was sent and the channel's receiverAuthorizer {} is not this facilitator's {own}",
                    config.receiverAuthorizer
                ),
            )),
        }
    }
}

/// A successful answer.
fn success(
    transaction: B256,
    payer: Option<String>,
    amount: String,
    asset: Option<String>,
    snapshot: Option<ChannelSnapshot>,
) -> BatchSettleResponse {
    BatchSettleResponse {
        success: true,
        error_reason: None,
        error_message: None,
        transaction: transaction.to_string(),
        network: String::new(),
        payer,
        amount,
        asset,
        extra: snapshot
            .map(|snapshot| Map::from_iter([("channelState".to_owned(), json!(snapshot))])),
    }
}

/// The claim rows of a payload.
fn claim_rows(claims: &[VoucherClaim]) -> Result<Vec<ClaimRow>, Rejection> {
    claims
        .iter()
        .enumerate()
        .map(|(index, claim)| {
            let malformed = |text: String| {
                Rejection::new(reason::CLAIM_PAYLOAD, format!("claims[{index}]: {text}"))
            };
            let config = typed_config(&claim.voucher.channel)
                .map_err(|error| malformed(error.to_string()))?;
            let amount = |field: &str, text: &str| {
                parse_amount(text)
                    .ok_or_else(|| malformed(format!("{field} `{text}` is not a decimal uint128")))
            };
            Ok(ClaimRow {
                config,
                max_claimable: amount(
                    "voucher.maxClaimableAmount",
                    &claim.voucher.max_claimable_amount,
                )?,
                signature: claim.signature.clone(),
                total_claimed: amount("totalClaimed", &claim.total_claimed)?,
            })
        })
        .collect()
}
