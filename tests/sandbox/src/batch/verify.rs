//! `/verify` of `batch-settlement` deposits, vouchers and refunds: the channel against the
//! requirement, the signatures, and the ceiling against the simulated contract's state.

use alloy_primitives::{Address, B256, U256};
use serde_json::Value;
use x402_wire::{FacilitatorRequest, PERMIT2_TRANSFER_METHOD, PaymentRequirements, UsdcDeployment};

use super::contract::{Erc3009Pull, Permit2Pull, Pull, recovers_to};
use super::parse::{parse_amount, parse_salt, typed_config};
use super::reason;
use super::typed::{
    self, ChannelConfig, MAX_WITHDRAW_DELAY, MIN_WITHDRAW_DELAY, PERMIT2_DEPOSIT_COLLECTOR,
};
use super::wire::{
    self, BATCH_SETTLEMENT_SCHEME, BatchPayload, BatchVerifyResponse, ChannelSnapshot,
    SignedVoucher,
};
use crate::SandboxFacilitator;
use crate::eip712::{self, parse_address, parse_decimal};
use crate::verify::{self, Rejection, Scheme, VALID_BEFORE_BUFFER_SECS};

const BATCH: Scheme = Scheme {
    name: BATCH_SETTLEMENT_SCHEME,
    requirement: "both must be `batch-settlement`",
    wrong_scheme: reason::SCHEME,
    network_mismatch: reason::NETWORK_MISMATCH,
};

/// A request that passed the envelope checks.
pub(super) struct Request<'a> {
    pub(super) requirements: &'a PaymentRequirements,
    pub(super) deployment: &'static UsdcDeployment,
    pub(super) chain_id: u64,
    pub(super) payload: BatchPayload,
}

/// A payload's channel, checked against the requirement.
pub(super) struct Channel {
    pub(super) config: ChannelConfig,
    pub(super) id: B256,
    pub(super) payer: String,
}

/// What `/verify` established: the payer and the channel's state.
pub(super) struct Verified {
    pub(super) payer: String,
    pub(super) snapshot: ChannelSnapshot,
}

impl SandboxFacilitator {
    /// `/verify` of a `batch-settlement` payload (deposit, voucher or refund) without the HTTP:
    /// the channel configuration against the requirement, the voucher's signature (ECDSA against
    /// `payerAuthorizer`, or EIP-1271 of the payer's wallet when it is zero), the deposit's
    /// ERC-3009 authorization, and the ceiling against the channel's balance and claims. Changes
    /// nothing; a valid answer carries the channel snapshot in `extra`.
    pub fn verify_batch(&self, request: &FacilitatorRequest) -> BatchVerifyResponse {
        match self
            .batch_request(request)
            .and_then(|parsed| self.verify_parsed(&parsed))
        {
            Ok(verified) => BatchVerifyResponse {
                is_valid: true,
                payer: Some(verified.payer),
                extra: Some(verified.snapshot),
                ..BatchVerifyResponse::default()
            },
            Err(rejection) => BatchVerifyResponse {
                is_valid: false,
                invalid_reason: Some(rejection.reason.to_owned()),
                invalid_message: Some(rejection.message),
                payer: rejection.payer,
                extra: None,
            },
        }
    }

    pub(super) fn batch_request<'a>(
        &self,
        request: &'a FacilitatorRequest,
    ) -> Result<Request<'a>, Rejection> {
        let deployment = verify::check_envelope(request, &BATCH)?;
        let requirements = request.payment_requirements();
        let raw = request.payment_payload().payload.get();
        let kind = serde_json::from_str::<Value>(raw)
            .ok()
            .and_then(|value| value.get("type").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default();
        let payload = serde_json::from_str::<BatchPayload>(raw).map_err(|error| {
            let code = match kind.as_str() {
                "deposit" => reason::DEPOSIT_PAYLOAD,
                "voucher" => reason::VOUCHER_PAYLOAD,
                "refund" => reason::REFUND_PAYLOAD,
                "claim" => reason::CLAIM_PAYLOAD,
                "settle" => reason::SETTLE_PAYLOAD,
                _ => reason::PAYLOAD_TYPE,
            };
            Rejection::new(
                code,
                format!("payload of type `{kind}` does not parse: {error}"),
            )
        })?;
        Ok(Request {
            requirements,
            deployment,
            chain_id: requirements.network.evm_chain_id().unwrap_or_default(),
            payload,
        })
    }

    pub(super) fn verify_parsed(&self, request: &Request<'_>) -> Result<Verified, Rejection> {
        let network = &request.requirements.network;
        match &request.payload {
            BatchPayload::Deposit {
                channel_config,
                voucher,
                deposit,
            } => {
                let channel = channel_of(request, channel_config, voucher)?;
                let reject = |code, text: String| {
                    Rejection::new(code, text).payer(Some(channel.payer.clone()))
                };
                let amount = parse_amount(&deposit.amount)
                    .filter(|amount| *amount > 0)
                    .ok_or_else(|| {
                        reject(
                            reason::DEPOSIT_PAYLOAD,
                            format!(
                                "deposit amount `{}` is not a positive decimal",
                                deposit.amount
                            ),
                        )
                    })?;
                let pull = self.check_pull(request, &channel, deposit, amount)?;
                self.check_voucher(request, &channel, voucher)?;
                let max = parse_amount(&voucher.max_claimable_amount).unwrap_or_default();
                let (escrow, snapshot) = self.snapshot(network, channel.id);
                let held = self.inner.ledger.balance(channel.config.payer).get();
                if held < amount {
                    return Err(reject(
                        reason::INSUFFICIENT_BALANCE,
                        format!("payer holds {held}, below the deposit {amount}"),
                    ));
                }
                if max > escrow.balance.saturating_add(amount) {
                    return Err(reject(
                        reason::CUMULATIVE_EXCEEDS_BALANCE,
                        format!(
                            "maxClaimableAmount {max} is above the balance {} plus the deposit {amount}",
                            escrow.balance
                        ),
                    ));
                }
                if max <= escrow.total_claimed {
                    return Err(reject(
                        reason::CUMULATIVE_BELOW_CLAIMED,
                        format!(
                            "maxClaimableAmount {max} is not above totalClaimed {}",
                            escrow.total_claimed
                        ),
                    ));
                }
                let (_, space, nonce) =
                    pull.authorization(&channel.config, channel.id, amount, request.chain_id);
                if self
                    .inner
                    .ledger
                    .nonce_used(network, space, channel.config.payer, nonce)
                {
                    return Err(reject(
                        reason::DEPOSIT_SIMULATION_FAILED,
                        format!("the deposit's authorization nonce {nonce} is already used"),
                    ));
                }
                Ok(Verified {
                    payer: channel.payer,
                    snapshot,
                })
            }
            BatchPayload::Voucher {
                channel_config,
                voucher,
            }
            | BatchPayload::Refund {
                channel_config,
                voucher,
                ..
            } => {
                let refund = matches!(request.payload, BatchPayload::Refund { .. });
                let channel = channel_of(request, channel_config, voucher)?;
                let reject = |code, text: String| {
                    Rejection::new(code, text).payer(Some(channel.payer.clone()))
                };
                self.check_voucher(request, &channel, voucher)?;
                let max = parse_amount(&voucher.max_claimable_amount).unwrap_or_default();
                let (escrow, snapshot) = self.snapshot(network, channel.id);
                if escrow.balance == 0 {
                    return Err(reject(
                        reason::CHANNEL_NOT_FOUND,
                        format!("channel {} has no balance", channel.id),
                    ));
                }
                if max > escrow.balance {
                    return Err(reject(
                        reason::CUMULATIVE_EXCEEDS_BALANCE,
                        format!(
                            "maxClaimableAmount {max} is above the balance {}",
                            escrow.balance
                        ),
                    ));
                }
                let below = if refund {
                    max < escrow.total_claimed
                } else {
                    max <= escrow.total_claimed
                };
                if below {
                    return Err(reject(
                        reason::CUMULATIVE_BELOW_CLAIMED,
                        format!(
                            "maxClaimableAmount {max} is below what was claimed ({})",
                            escrow.total_claimed
                        ),
                    ));
                }
                Ok(Verified {
                    payer: channel.payer,
                    snapshot,
                })
            }
            BatchPayload::Claim { .. } | BatchPayload::Settle { .. } => Err(Rejection::new(
                reason::PAYLOAD_TYPE,
                "claims and sweeps are settled, not verified",
            )),
        }
    }

    /// The deposit's token authorization, by the requirement's `extra.assetTransferMethod` (or,
    /// without one, by which authorization the deposit carries), checked as the collector would
    /// and signed by the payer.
    pub(super) fn check_pull(
        &self,
        request: &Request<'_>,
        channel: &Channel,
        deposit: &wire::Deposit,
        amount: u128,
    ) -> Result<Pull, Rejection> {
        let reject =
            |code, text: String| Rejection::new(code, text).payer(Some(channel.payer.clone()));
        let hint = request.requirements.asset_transfer_method();
        let permit2 = match hint {
            Some(method) => method == PERMIT2_TRANSFER_METHOD,
            None => deposit.authorization.permit2_authorization.is_some(),
        };
        let (pull, refused) = if permit2 {
            let Some(permit) = &deposit.authorization.permit2_authorization else {
                return Err(reject(
                    reason::PERMIT2_AUTHORIZATION_REQUIRED,
                    "the deposit's transfer method is Permit2 and it has no permit2Authorization"
                        .into(),
                ));
            };
            let pull = self.check_permit2(request, channel, permit, &deposit.amount, amount)?;
            (Pull::Permit2(pull), reason::PERMIT2_INVALID_SIGNATURE)
        } else {
            let Some(auth) = &deposit.authorization.erc3009_authorization else {
                return Err(reject(
                    reason::ERC3009_AUTHORIZATION_REQUIRED,
                    "the deposit has no erc3009Authorization".into(),
                ));
            };
            let pull = self.check_erc3009(request, channel, auth)?;
            (Pull::Erc3009(pull), reason::RECEIVE_AUTHORIZATION_SIGNATURE)
        };
        let (digest, _, _) =
            pull.authorization(&channel.config, channel.id, amount, request.chain_id);
        let owner = self
            .wallet_owner(channel.config.payer)
            .unwrap_or(channel.config.payer);
        if !recovers_to(digest, pull.signature(), owner) {
            return Err(reject(
                refused,
                "the deposit's authorization is not signed by the payer".to_owned(),
            ));
        }
        Ok(pull)
    }

    /// An ERC-3009 deposit: the token's domain named, inside its time window.
    fn check_erc3009(
        &self,
        request: &Request<'_>,
        channel: &Channel,
        auth: &wire::Erc3009Deposit,
    ) -> Result<Erc3009Pull, Rejection> {
        let reject =
            |code, text: String| Rejection::new(code, text).payer(Some(channel.payer.clone()));
        let domain = eip712::domain_of(request.requirements)
            .map_err(|error| reject(reason::MISSING_EIP712_DOMAIN, error.to_string()))?;
        // The token checks the signature under its own domain, whatever the requirement says.
        let token_domain = match request.deployment.eip712 {
            Some(token) => eip712::token_domain(
                token.name,
                token.version,
                request.chain_id,
                channel.config.token,
            ),
            None => domain,
        };
        let number = |field: &str, value: &str| {
            parse_decimal(value).ok_or_else(|| {
                reject(
                    reason::DEPOSIT_PAYLOAD,
                    format!("erc3009Authorization.{field} `{value}` is not a decimal"),
                )
            })
        };
        let valid_after = number("validAfter", &auth.valid_after)?;
        let valid_before = number("validBefore", &auth.valid_before)?;
        let salt = parse_salt(&auth.salt).ok_or_else(|| {
            reject(
                reason::DEPOSIT_PAYLOAD,
                format!(
                    "erc3009Authorization.salt `{}` is not 32 bytes of 0x-hex",
                    auth.salt
                ),
            )
        })?;
        let now = self.now();
        if valid_before < U256::from(now) + U256::from(VALID_BEFORE_BUFFER_SECS) {
            return Err(reject(
                reason::VALID_BEFORE,
                format!(
                    "validBefore {valid_before} is not at least {VALID_BEFORE_BUFFER_SECS} s after now ({now})"
                ),
            ));
        }
        if valid_after > U256::from(now) {
            return Err(reject(
                reason::VALID_AFTER,
                format!("validAfter {valid_after} is in the future (now {now})"),
            ));
        }
        Ok(Erc3009Pull {
            valid_after,
            valid_before,
            salt,
            signature: auth.signature.clone(),
            token_domain,
        })
    }

    /// A Permit2 deposit, in the reference facilitator's order: `from` the payer, spender the
    /// collector, the asset, the deposit's amount, the channel as witness, the deadline.
    fn check_permit2(
        &self,
        request: &Request<'_>,
        channel: &Channel,
        permit: &wire::Permit2Deposit,
        wire_amount: &str,
        amount: u128,
    ) -> Result<Permit2Pull, Rejection> {
        let reject =
            |code, text: String| Rejection::new(code, text).payer(Some(channel.payer.clone()));
        if parse_address(&permit.from) != Some(channel.config.payer) {
            return Err(reject(
                reason::PERMIT2_INVALID_SIGNATURE,
                format!("permit from {} is not the channel's payer", permit.from),
            ));
        }
        if parse_address(&permit.spender) != Some(PERMIT2_DEPOSIT_COLLECTOR) {
            return Err(reject(
                reason::PERMIT2_INVALID_SPENDER,
                format!(
                    "spender {} is not the Permit2DepositCollector",
                    permit.spender
                ),
            ));
        }
        if parse_address(&permit.permitted.token) != parse_address(&request.requirements.asset) {
            return Err(reject(
                reason::TOKEN_MISMATCH,
                format!(
                    "permitted.token {} is not the asset",
                    permit.permitted.token
                ),
            ));
        }
        if parse_amount(&permit.permitted.amount) != Some(amount) {
            return Err(reject(
                reason::PERMIT2_AMOUNT_MISMATCH,
                format!(
                    "permitted.amount {} is not the deposit {wire_amount}",
                    permit.permitted.amount
                ),
            ));
        }
        if permit.witness.channel_id.parse::<B256>().ok() != Some(channel.id) {
            return Err(reject(
                reason::CHANNEL_ID_MISMATCH,
                format!(
                    "witness.channelId {} is not the channel",
                    permit.witness.channel_id
                ),
            ));
        }
        let number = |field: &str, value: &str| {
            parse_decimal(value).ok_or_else(|| {
                reject(
                    reason::DEPOSIT_PAYLOAD,
                    format!("permit2Authorization.{field} `{value}` is not a decimal"),
                )
            })
        };
        let nonce = number("nonce", &permit.nonce)?;
        let deadline = number("deadline", &permit.deadline)?;
        let now = self.now();
        if deadline < U256::from(now) + U256::from(VALID_BEFORE_BUFFER_SECS) {
            return Err(reject(
                reason::PERMIT2_DEADLINE_EXPIRED,
                format!(
                    "deadline {deadline} is not at least {VALID_BEFORE_BUFFER_SECS} s after now ({now})"
                ),
            ));
        }
        Ok(Permit2Pull {
            nonce,
            deadline,
            signature: permit.signature.clone(),
        })
    }

    /// The voucher's signature: ECDSA against `payerAuthorizer`, or the payer's EIP-1271 wallet
    /// when `payerAuthorizer` is zero.
    fn check_voucher(
        &self,
        request: &Request<'_>,
        channel: &Channel,
        voucher: &SignedVoucher,
    ) -> Result<(), Rejection> {
        let max = parse_amount(&voucher.max_claimable_amount).ok_or_else(|| {
            Rejection::new(
                reason::VOUCHER_PAYLOAD,
                format!(
                    "maxClaimableAmount `{}` is not a decimal uint128",
                    voucher.max_claimable_amount
                ),
            )
            .payer(Some(channel.payer.clone()))
        })?;
        let digest = typed::voucher_digest(channel.id, max, request.chain_id);
        let config = &channel.config;
        let valid = if config.payerAuthorizer == Address::ZERO {
            let owner = self.wallet_owner(config.payer).unwrap_or(config.payer);
            recovers_to(digest, &voucher.signature, owner)
        } else {
            recovers_to(digest, &voucher.signature, config.payerAuthorizer)
        };
        if valid {
            Ok(())
        } else {
            Err(Rejection::new(
                reason::VOUCHER_SIGNATURE,
                "the voucher signature does not recover to the channel's payer authorizer",
            )
            .payer(Some(channel.payer.clone())))
        }
    }
}

/// The payload's channel against the voucher's id and the requirement, in the reference
/// facilitator's order: id, receiver, receiver authorizer, token, withdrawal delay, its range.
pub(super) fn channel_of(
    request: &Request<'_>,
    wire_config: &wire::ChannelConfig,
    voucher: &SignedVoucher,
) -> Result<Channel, Rejection> {
    let payer = Some(wire_config.payer.clone());
    let reject = |code, text: String| Rejection::new(code, text).payer(payer.clone());
    let config = typed_config(wire_config)
        .map_err(|error| reject(reason::PAYLOAD_TYPE, error.to_string()))?;
    let payer = config.payer.to_checksum(None);
    let reject = |code, text: String| Rejection::new(code, text).payer(Some(payer.clone()));
    let id = typed::channel_id(&config, request.chain_id);
    if voucher.channel_id.parse::<B256>().ok() != Some(id) {
        return Err(reject(
            reason::CHANNEL_ID_MISMATCH,
            format!(
                "channelConfig hashes to {id}, not the voucher's channelId {}",
                voucher.channel_id
            ),
        ));
    }
    let requirements = request.requirements;
    if parse_address(&requirements.pay_to) != Some(config.receiver) {
        return Err(reject(
            reason::RECEIVER_MISMATCH,
            format!(
                "channel receiver {} is not payTo {}",
                config.receiver, requirements.pay_to
            ),
        ));
    }
    let extra = |key: &str| requirements.extra.as_ref().and_then(|extra| extra.get(key));
    let authorizer = extra("receiverAuthorizer")
        .and_then(Value::as_str)
        .and_then(parse_address);
    if authorizer.is_none_or(|authorizer| {
        authorizer == Address::ZERO || authorizer != config.receiverAuthorizer
    }) {
        return Err(reject(
            reason::RECEIVER_AUTHORIZER_MISMATCH,
            format!(
                "channel receiverAuthorizer {} is not the requirement's extra.receiverAuthorizer",
                config.receiverAuthorizer
            ),
        ));
    }
    if parse_address(&requirements.asset) != Some(config.token) {
        return Err(reject(
            reason::TOKEN_MISMATCH,
            format!(
                "channel token {} is not the asset {}",
                config.token, requirements.asset
            ),
        ));
    }
    let delay = wire_config.withdraw_delay;
    if let Some(wanted) = extra("withdrawDelay")
        && wanted.as_u64() != Some(delay)
    {
        return Err(reject(
            reason::WITHDRAW_DELAY_MISMATCH,
            format!("channel withdrawDelay {delay} is not extra.withdrawDelay {wanted}"),
        ));
    }
    if !(MIN_WITHDRAW_DELAY..=MAX_WITHDRAW_DELAY).contains(&delay) {
        return Err(reject(
            reason::WITHDRAW_DELAY_OUT_OF_RANGE,
            format!(
                "withdrawDelay {delay} is outside {MIN_WITHDRAW_DELAY}..={MAX_WITHDRAW_DELAY} seconds"
            ),
        ));
    }
    Ok(Channel { config, id, payer })
}
