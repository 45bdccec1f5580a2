//! The facilitator's side of `batch-settlement`: `/verify` of deposits, vouchers and refunds,
//! and `/settle` of deposits, claims, sweeps and (server-completed) refunds, against the
//! simulated contract, with the specification's answers and reason codes.

use alloy_primitives::{Address, B256, Signature, U256};
use serde_json::{Map, Value, json};
use tower_x402::proto::{FacilitatorRequest, Network, PaymentRequirements, UsdcDeployment};

use super::contract::{Authority, ClaimRow, Env, Erc3009Pull, Escrow, Revert, recovers_to};
use super::typed::{self, BATCH_SETTLEMENT, ChannelConfig, MAX_WITHDRAW_DELAY, MIN_WITHDRAW_DELAY};
use super::wire::{
    self, BATCH_SETTLEMENT_SCHEME, BatchPayload, BatchSettleResponse, BatchVerifyResponse,
    ChannelSnapshot, SignedVoucher, VoucherClaim,
};
use super::{ChannelError, reason};
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
struct Request<'a> {
    requirements: &'a PaymentRequirements,
    deployment: &'static UsdcDeployment,
    chain_id: u64,
    payload: BatchPayload,
}

/// A payload's channel, checked against the requirement.
struct Channel {
    config: ChannelConfig,
    id: B256,
    payer: String,
}

/// What `/verify` established: the payer and the channel's state.
struct Verified {
    payer: String,
    snapshot: ChannelSnapshot,
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

    /// `/settle` of a `batch-settlement` payload without the HTTP: a deposit (verified again,
    /// then pulled into the channel), `type: "claim"` (claims of many channels in one call),
    /// `type: "settle"` (the sweep of a receiver's claimed funds) or a refund completed by the
    /// server (its claims and the refund in one call). Without an authorizer signature the
    /// facilitator signs with its own receiver-authorizer key, which it can only do for channels
    /// naming that key.
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

    fn batch_request<'a>(&self, request: &'a FacilitatorRequest) -> Result<Request<'a>, Rejection> {
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

    /// The contract's environment on `network` now.
    fn env<'a>(
        &'a self,
        network: &'a Network,
        wallet_owner: &'a dyn Fn(Address) -> Option<Address>,
    ) -> Env<'a> {
        Env {
            ledger: &self.inner.ledger,
            wallet_owner,
            now: self.now(),
            network,
            chain_id: network.evm_chain_id().unwrap_or_default(),
        }
    }

    pub(crate) fn wallet_owner(&self, address: Address) -> Option<Address> {
        self.inner
            .contract_wallets
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&address)
            .copied()
    }

    fn snapshot(&self, network: &Network, id: B256) -> (Escrow, ChannelSnapshot) {
        let (escrow, withdrawal, nonce) = self.inner.batch.contract.channel(network, id);
        let snapshot = ChannelSnapshot {
            channel_id: id.to_string(),
            balance: escrow.balance.to_string(),
            total_claimed: escrow.total_claimed.to_string(),
            withdraw_requested_at: withdrawal.initiated_at,
            refund_nonce: nonce.to_string(),
        };
        (escrow, snapshot)
    }

    fn verify_parsed(&self, request: &Request<'_>) -> Result<Verified, Rejection> {
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
                let nonce = typed::deposit_nonce(channel.id, pull.salt);
                if self.inner.ledger.nonce_used(
                    network,
                    channel.config.token,
                    channel.config.payer,
                    nonce,
                ) {
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

    /// The deposit's ERC-3009 part: present, the token's domain named, inside its time window,
    /// signed by the payer under the token's domain.
    fn check_pull(
        &self,
        request: &Request<'_>,
        channel: &Channel,
        deposit: &wire::Deposit,
        amount: u128,
    ) -> Result<Erc3009Pull, Rejection> {
        let reject =
            |code, text: String| Rejection::new(code, text).payer(Some(channel.payer.clone()));
        let Some(auth) = &deposit.authorization.erc3009_authorization else {
            let text = if deposit.authorization.permit2_authorization.is_some() {
                "Permit2 deposits are not simulated by the sandbox; send erc3009Authorization"
            } else {
                "the deposit has no erc3009Authorization"
            };
            return Err(reject(
                reason::ERC3009_AUTHORIZATION_REQUIRED,
                text.to_owned(),
            ));
        };
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
        let pull = Erc3009Pull {
            valid_after,
            valid_before,
            salt,
            signature: auth.signature.clone(),
            token_domain,
        };
        let message = typed::ReceiveWithAuthorization {
            from: channel.config.payer,
            to: typed::ERC3009_DEPOSIT_COLLECTOR,
            value: U256::from(amount),
            validAfter: valid_after,
            validBefore: valid_before,
            nonce: typed::deposit_nonce(channel.id, salt),
        };
        let digest = alloy_sol_types::SolStruct::eip712_signing_hash(&message, &pull.token_domain);
        let owner = self
            .wallet_owner(channel.config.payer)
            .unwrap_or(channel.config.payer);
        if !recovers_to(digest, &pull.signature, owner) {
            return Err(reject(
                reason::RECEIVE_AUTHORIZATION_SIGNATURE,
                "the receiveWithAuthorization signature is not the payer's under the token's EIP-712 domain".to_owned(),
            ));
        }
        Ok(pull)
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
                if claimed_after <= escrow.balance && escrow.balance - claimed_after == 0 {
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

    /// Answers an `eth_call` to the contract on `network`: `channels`, `pendingWithdrawals`,
    /// `refundNonce`, `receivers`.
    pub(crate) fn batch_call(&self, network: &Network, input: &[u8]) -> Result<Vec<u8>, String> {
        use alloy_sol_types::SolCall as _;
        let contract = &self.inner.batch.contract;
        if let Ok(call) = typed::channelsCall::abi_decode(input) {
            let (escrow, _, _) = contract.channel(network, call.channelId);
            return Ok(typed::channelsCall::abi_encode_returns(
                &typed::channelsReturn {
                    balance: escrow.balance,
                    totalClaimed: escrow.total_claimed,
                },
            ));
        }
        if let Ok(call) = typed::pendingWithdrawalsCall::abi_decode(input) {
            let (_, withdrawal, _) = contract.channel(network, call.channelId);
            return Ok(typed::pendingWithdrawalsCall::abi_encode_returns(
                &typed::pendingWithdrawalsReturn {
                    amount: withdrawal.amount,
                    initiatedAt: alloy_primitives::aliases::U40::saturating_from(
                        withdrawal.initiated_at,
                    ),
                },
            ));
        }
        if let Ok(call) = typed::refundNonceCall::abi_decode(input) {
            let (_, _, nonce) = contract.channel(network, call.channelId);
            return Ok(typed::refundNonceCall::abi_encode_returns(&nonce));
        }
        if let Ok(call) = typed::receiversCall::abi_decode(input) {
            let totals = contract.receiver(network, call.receiver, call.token);
            return Ok(typed::receiversCall::abi_encode_returns(
                &typed::receiversReturn {
                    totalClaimed: totals.total_claimed,
                    totalSettled: totals.total_settled,
                },
            ));
        }
        Err("execution reverted: x402BatchSettlement serves channels, pendingWithdrawals, refundNonce and receivers".to_owned())
    }

    /// The sandbox's `receiverAuthorizer` for `batch-settlement`, listed in `/supported`: the
    /// facilitator signs claims and refunds with it for the channels that name it.
    pub fn receiver_authorizer(&self) -> String {
        Address::from_private_key(&self.inner.batch.authorizer).to_checksum(None)
    }

    /// The on-chain state of channel `channel_id` on `network`, as the contract's views
    /// `channels`, `pendingWithdrawals` and `refundNonce` show it.
    ///
    /// # Errors
    ///
    /// When `channel_id` is not 32 bytes of `0x`-hex.
    pub fn channel_state(
        &self,
        network: &Network,
        channel_id: &str,
    ) -> Result<super::ChannelView, ChannelError> {
        let id = channel_id.parse::<B256>().map_err(|_| {
            ChannelError::Malformed(format!(
                "channel id `{channel_id}` is not 32 bytes of 0x-hex"
            ))
        })?;
        let (escrow, withdrawal, nonce) = self.inner.batch.contract.channel(network, id);
        Ok(super::ChannelView {
            balance: escrow.balance,
            total_claimed: escrow.total_claimed,
            pending_withdrawal: withdrawal.amount,
            withdraw_requested_at: withdrawal.initiated_at,
            refund_nonce: nonce.to::<u128>(),
        })
    }

    /// The contract's `receivers(receiver, token)` on `network`: what was claimed for the
    /// receiver in the token, and how much of it was swept to it.
    ///
    /// # Errors
    ///
    /// When `receiver` or `token` is not an address.
    pub fn receiver_totals(
        &self,
        network: &Network,
        receiver: &str,
        token: &str,
    ) -> Result<(u128, u128), ChannelError> {
        let receiver = address(receiver)?;
        let token = address(token)?;
        let totals = self.inner.batch.contract.receiver(network, receiver, token);
        Ok((totals.total_claimed, totals.total_settled))
    }

    /// The payer side's `initiateWithdraw(config, amount)`, sent by `sender` (the payer or its
    /// authorizer) on `network` now: starts the timed withdrawal that
    /// [`finalize_withdraw`](Self::finalize_withdraw) completes after `withdrawDelay`.
    ///
    /// # Errors
    ///
    /// A malformed configuration or the contract's revert.
    pub fn initiate_withdraw(
        &self,
        network: &Network,
        config: &wire::ChannelConfig,
        amount: u128,
        sender: &str,
    ) -> Result<String, ChannelError> {
        let (config, sender) = (typed_config(config)?, address(sender)?);
        let owner = |address| self.wallet_owner(address);
        let receipt = self.inner.batch.contract.initiate_withdraw(
            &self.env(network, &owner),
            &config,
            amount,
            sender,
        )?;
        Ok(receipt.transaction.to_string())
    }

    /// The payer side's `finalizeWithdraw(config)`, sent by `sender` on `network` now: answers
    /// the amount returned to the payer, capped by what is still unclaimed.
    ///
    /// # Errors
    ///
    /// A malformed configuration or the contract's revert (`WithdrawDelayNotElapsed` before the
    /// delay).
    pub fn finalize_withdraw(
        &self,
        network: &Network,
        config: &wire::ChannelConfig,
        sender: &str,
    ) -> Result<u128, ChannelError> {
        let (config, sender) = (typed_config(config)?, address(sender)?);
        let owner = |address| self.wallet_owner(address);
        let receipt = self.inner.batch.contract.finalize_withdraw(
            &self.env(network, &owner),
            &config,
            sender,
        )?;
        Ok(receipt.value)
    }

    /// The receiver side's direct `refund(config, amount)`, sent by `sender` (the receiver or
    /// its authorizer) on `network`: answers the amount returned, capped by what is unclaimed.
    /// The refund nonce advances even when nothing moves.
    ///
    /// # Errors
    ///
    /// A malformed configuration or the contract's revert.
    pub fn refund_directly(
        &self,
        network: &Network,
        config: &wire::ChannelConfig,
        amount: u128,
        sender: &str,
    ) -> Result<u128, ChannelError> {
        let (config, sender) = (typed_config(config)?, address(sender)?);
        let owner = |address| self.wallet_owner(address);
        let receipt = self.inner.batch.contract.claim_and_refund(
            &self.env(network, &owner),
            None,
            &config,
            amount,
            U256::ZERO,
            &Authority::Sender(sender),
        )?;
        Ok(receipt.value)
    }
}

impl From<Revert> for ChannelError {
    fn from(revert: Revert) -> Self {
        Self::Reverted(revert.to_string())
    }
}

fn address(text: &str) -> Result<Address, ChannelError> {
    parse_address(text)
        .ok_or_else(|| ChannelError::Malformed(format!("`{text}` is not an address")))
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

/// Signs `digest` with `key`, as 65 bytes `r ‖ s ‖ v` in `0x`-hex.
pub(crate) fn sign(key: &k256::ecdsa::SigningKey, digest: B256) -> String {
    // Signing a 32-byte prehash with a valid key does not fail.
    match key.sign_prehash_recoverable(digest.as_slice()) {
        Ok((signature, recovery)) => {
            let signature = Signature::from_signature_and_parity(signature, recovery.is_y_odd());
            alloy_primitives::hex::encode_prefixed(signature.as_bytes())
        }
        Err(_) => String::new(),
    }
}

/// A decimal uint128.
pub(crate) fn parse_amount(text: &str) -> Option<u128> {
    parse_decimal(text).and_then(|value| u128::try_from(value).ok())
}

/// A 32-byte `0x`-hex salt as a uint256.
pub(crate) fn parse_salt(text: &str) -> Option<U256> {
    let digits = text.strip_prefix("0x")?;
    if digits.is_empty() || digits.len() > 64 {
        return None;
    }
    U256::from_str_radix(digits, 16).ok()
}

/// The wire configuration as typed data.
pub(crate) fn typed_config(config: &wire::ChannelConfig) -> Result<ChannelConfig, ChannelError> {
    let address = |field: &str, text: &str| {
        parse_address(text).ok_or_else(|| {
            ChannelError::Malformed(format!("channel {field} `{text}` is not an address"))
        })
    };
    let salt = config
        .salt
        .strip_prefix("0x")
        .filter(|digits| digits.len() == 64)
        .and_then(|_| config.salt.parse::<B256>().ok())
        .ok_or_else(|| {
            ChannelError::Malformed(format!(
                "channel salt `{}` is not 32 bytes of 0x-hex",
                config.salt
            ))
        })?;
    Ok(ChannelConfig {
        payer: address("payer", &config.payer)?,
        payerAuthorizer: address("payerAuthorizer", &config.payer_authorizer)?,
        receiver: address("receiver", &config.receiver)?,
        receiverAuthorizer: address("receiverAuthorizer", &config.receiver_authorizer)?,
        token: address("token", &config.token)?,
        withdrawDelay: alloy_primitives::aliases::U40::try_from(config.withdraw_delay).map_err(
            |_| {
                ChannelError::Malformed(format!(
                    "withdrawDelay {} is not a uint40",
                    config.withdraw_delay
                ))
            },
        )?,
        salt,
    })
}

/// The payload's channel against the voucher's id and the requirement, in the reference
/// facilitator's order: id, receiver, receiver authorizer, token, withdrawal delay, its range.
fn channel_of(
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

/// Is `BATCH_SETTLEMENT` the contract `to` names?
pub(crate) fn is_contract(to: Option<Address>) -> bool {
    to == Some(BATCH_SETTLEMENT)
}
