//! The buyer's side of `batch-settlement` in [`SandboxWallet`]: a channel configuration for an
//! accept, deposit, voucher and refund payloads, and, for a server that owns its receiver
//! authorizer key, claim-batch and refund authorizations.

use alloy_primitives::{B256, U256};
use alloy_sol_types::SolStruct as _;
use x402_wire::{Network, PaymentPayload, PaymentRequirements, X402Version};

use super::parse::{parse_amount, sign, typed_config};
use super::typed::{
    self, DepositWitness, ERC3009_DEPOSIT_COLLECTOR, PERMIT2_DEPOSIT_COLLECTOR,
    PermitWitnessTransferFrom, ReceiveWithAuthorization, TokenPermissions,
};
use super::wire::{
    self, BatchPayload, ChannelConfig, Deposit, DepositAuthorization, Erc3009Deposit,
    Permit2Deposit, SignedVoucher, VoucherClaim,
};
use crate::typed_data::permit2_domain;
use crate::{SandboxWallet, WalletError, eip712};

impl SandboxWallet {
    /// The channel this wallet opens for a `batch-settlement` `accept`: payer and payer
    /// authorizer this wallet, receiver `payTo`, receiver authorizer `extra.receiverAuthorizer`,
    /// token `asset`, `extra.withdrawDelay`, and `salt`.
    ///
    /// ```
    /// use x402_wire::{AtomicAmount, PaymentRequirements, UsdcDeployment};
    /// use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
    ///
    /// let facilitator = SandboxFacilitator::new();
    /// let usdc = &UsdcDeployment::BASE;
    /// let mut extra = usdc.eip712.map(|domain| domain.to_extra()).unwrap_or_default();
    /// extra.insert("receiverAuthorizer".into(), facilitator.receiver_authorizer().into());
    /// extra.insert("withdrawDelay".into(), 900.into());
    /// let accept = PaymentRequirements {
    ///     scheme: "batch-settlement".into(),
    ///     network: usdc.network.clone(),
    ///     amount: AtomicAmount(10_000),
    ///     asset: usdc.asset.into(),
    ///     pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
    ///     max_timeout_seconds: 3600,
    ///     extra: Some(extra),
    /// };
    /// let wallet = SandboxWallet::random();
    /// let config = wallet.channel_config(&accept, [0; 32])?;
    /// assert_eq!(config.payer, wallet.address());
    /// assert_eq!(SandboxWallet::channel_id(&config, &accept.network)?.len(), 66);
    /// # Ok::<_, tower_x402_sandbox::WalletError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// When `extra.receiverAuthorizer` or `extra.withdrawDelay` is missing.
    pub fn channel_config(
        &self,
        accept: &PaymentRequirements,
        salt: [u8; 32],
    ) -> Result<ChannelConfig, WalletError> {
        let extra = |key: &str| accept.extra.as_ref().and_then(|extra| extra.get(key));
        let authorizer = extra("receiverAuthorizer")
            .and_then(|value| value.as_str())
            .ok_or_else(|| WalletError::Unsignable("no extra.receiverAuthorizer".into()))?;
        let delay = extra("withdrawDelay")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| WalletError::Unsignable("no numeric extra.withdrawDelay".into()))?;
        Ok(ChannelConfig {
            payer: self.address(),
            payer_authorizer: self.address(),
            receiver: accept.pay_to.clone(),
            receiver_authorizer: authorizer.to_owned(),
            token: accept.asset.clone(),
            withdraw_delay: delay,
            salt: B256::from(salt).to_string(),
        })
    }

    /// The id of `config` on `network`: its EIP-712 hash under the contract's domain.
    ///
    /// # Errors
    ///
    /// A configuration that does not parse or a network that is not EVM.
    pub fn channel_id(config: &ChannelConfig, network: &Network) -> Result<String, WalletError> {
        let chain_id = chain_id(network)?;
        let config = typed_config(config).map_err(|e| WalletError::Unsignable(e.to_string()))?;
        Ok(typed::channel_id(&config, chain_id).to_string())
    }

    /// A voucher for `max_claimable` (the new cumulative ceiling) on channel `channel_id`.
    ///
    /// # Errors
    ///
    /// A channel id that is not 32 bytes of hex or a network that is not EVM.
    pub fn sign_voucher(
        &self,
        network: &Network,
        channel_id: &str,
        max_claimable: u128,
    ) -> Result<SignedVoucher, WalletError> {
        let id = parse_id(channel_id)?;
        let digest = typed::voucher_digest(id, max_claimable, chain_id(network)?);
        Ok(SignedVoucher {
            channel_id: id.to_string(),
            max_claimable_amount: max_claimable.to_string(),
            signature: self.sign_digest(digest)?,
        })
    }

    /// A `deposit` payment for `accept` as of unix time `now`: `deposit` tokens of the channel's
    /// payer (this wallet, or a contract wallet it owns) pulled into the channel with an ERC-3009
    /// authorization (`validAfter` 0, `validBefore` now plus `maxTimeoutSeconds`, a random salt)
    /// signed under the token's domain from `accept` — or, when `extra.assetTransferMethod` is
    /// `permit2`, a Permit2 permit to the `Permit2DepositCollector` with the channel as witness
    /// (a random nonce, `deadline` now plus `maxTimeoutSeconds`) — and the request's voucher for
    /// `max_claimable`.
    ///
    /// # Errors
    ///
    /// As [`channel_id`](Self::channel_id), or a requirement without the token's domain.
    pub fn deposit_payment_at(
        &self,
        accept: &PaymentRequirements,
        config: &ChannelConfig,
        deposit: u128,
        max_claimable: u128,
        now: u64,
    ) -> Result<PaymentPayload, WalletError> {
        let id = Self::channel_id(config, &accept.network)?;
        let from = typed_config(config)
            .map_err(|e| WalletError::Unsignable(e.to_string()))?
            .payer;
        let deadline = now.saturating_add(accept.max_timeout_seconds);
        let permit2 = accept.pays_through_permit2();
        let authorization = if permit2 {
            let nonce = U256::from_be_bytes(rand::random::<[u8; 32]>());
            let message = PermitWitnessTransferFrom {
                permitted: TokenPermissions {
                    token: from_config(config)?.token,
                    amount: U256::from(deposit),
                },
                spender: PERMIT2_DEPOSIT_COLLECTOR,
                nonce,
                deadline: U256::from(deadline),
                witness: DepositWitness {
                    channelId: parse_id(&id)?,
                },
            };
            let chain_id = chain_id(&accept.network)?;
            let signature =
                self.sign_digest(message.eip712_signing_hash(&permit2_domain(chain_id)))?;
            DepositAuthorization {
                erc3009_authorization: None,
                permit2_authorization: Some(Permit2Deposit {
                    from: from.to_checksum(None),
                    permitted: x402_wire::TokenPermissions {
                        token: message.permitted.token.to_checksum(None),
                        amount: deposit.to_string(),
                    },
                    spender: PERMIT2_DEPOSIT_COLLECTOR.to_checksum(None),
                    nonce: nonce.to_string(),
                    deadline: deadline.to_string(),
                    witness: wire::DepositWitness {
                        channel_id: id.clone(),
                    },
                    signature,
                }),
            }
        } else {
            let domain =
                eip712::domain_of(accept).map_err(|e| WalletError::Unsignable(e.to_string()))?;
            let salt = B256::from(rand::random::<[u8; 32]>());
            let message = ReceiveWithAuthorization {
                from,
                to: ERC3009_DEPOSIT_COLLECTOR,
                value: U256::from(deposit),
                validAfter: U256::ZERO,
                validBefore: U256::from(deadline),
                nonce: typed::deposit_nonce(parse_id(&id)?, U256::from_be_bytes(salt.0)),
            };
            DepositAuthorization {
                erc3009_authorization: Some(Erc3009Deposit {
                    valid_after: "0".into(),
                    valid_before: deadline.to_string(),
                    salt: salt.to_string(),
                    signature: self.sign_digest(message.eip712_signing_hash(&domain))?,
                }),
                permit2_authorization: None,
            }
        };
        let payload = BatchPayload::Deposit {
            channel_config: config.clone(),
            voucher: self.sign_voucher(&accept.network, &id, max_claimable)?,
            deposit: Deposit {
                amount: deposit.to_string(),
                authorization,
            },
        };
        payment(accept, &payload)
    }

    /// A `voucher` payment for `accept`: the request's voucher for `max_claimable` (the charged
    /// cumulative plus the accept's `amount`).
    ///
    /// # Errors
    ///
    /// As [`channel_id`](Self::channel_id).
    pub fn voucher_payment(
        &self,
        accept: &PaymentRequirements,
        config: &ChannelConfig,
        max_claimable: u128,
    ) -> Result<PaymentPayload, WalletError> {
        let id = Self::channel_id(config, &accept.network)?;
        let payload = BatchPayload::Voucher {
            channel_config: config.clone(),
            voucher: self.sign_voucher(&accept.network, &id, max_claimable)?,
        };
        payment(accept, &payload)
    }

    /// A `refund` request for `accept`: the zero-charge voucher (`charged`, what the channel was
    /// charged so far) and `amount` to refund, or everything when `None`.
    ///
    /// # Errors
    ///
    /// As [`channel_id`](Self::channel_id).
    pub fn refund_payment(
        &self,
        accept: &PaymentRequirements,
        config: &ChannelConfig,
        charged: u128,
        amount: Option<u128>,
    ) -> Result<PaymentPayload, WalletError> {
        let id = Self::channel_id(config, &accept.network)?;
        let payload = BatchPayload::Refund {
            channel_config: config.clone(),
            voucher: self.sign_voucher(&accept.network, &id, charged)?,
            amount: amount.map(|amount| amount.to_string()),
            refund_nonce: None,
            claims: None,
            refund_authorizer_signature: None,
            claim_authorizer_signature: None,
        };
        payment(accept, &payload)
    }

    /// As a server's own receiver authorizer: the `claimAuthorizerSignature` of `claims` on
    /// `network` (EIP-712 `ClaimBatch` of each row's channel id, ceiling and total).
    ///
    /// # Errors
    ///
    /// A row that does not parse or a network that is not EVM.
    pub fn sign_claim_batch(
        &self,
        network: &Network,
        claims: &[VoucherClaim],
    ) -> Result<String, WalletError> {
        let chain_id = chain_id(network)?;
        let entries = claims
            .iter()
            .map(|claim| {
                let config = typed_config(&claim.voucher.channel)
                    .map_err(|e| WalletError::Unsignable(e.to_string()))?;
                let amount = |text: &str| {
                    parse_amount(text).ok_or_else(|| {
                        WalletError::Unsignable(format!("`{text}` is not a uint128"))
                    })
                };
                Ok(typed::ClaimEntry {
                    channelId: typed::channel_id(&config, chain_id),
                    maxClaimableAmount: amount(&claim.voucher.max_claimable_amount)?,
                    totalClaimed: amount(&claim.total_claimed)?,
                })
            })
            .collect::<Result<Vec<_>, WalletError>>()?;
        self.sign_digest(typed::claim_batch_digest(entries, chain_id))
    }

    /// As a server's own receiver authorizer: the `refundAuthorizerSignature` for refunding
    /// `amount` of channel `channel_id` at refund nonce `nonce` on `network`.
    ///
    /// # Errors
    ///
    /// A channel id that is not 32 bytes of hex or a network that is not EVM.
    pub fn sign_refund(
        &self,
        network: &Network,
        channel_id: &str,
        nonce: u128,
        amount: u128,
    ) -> Result<String, WalletError> {
        let digest = typed::refund_digest(
            parse_id(channel_id)?,
            U256::from(nonce),
            amount,
            chain_id(network)?,
        );
        self.sign_digest(digest)
    }

    fn sign_digest(&self, digest: B256) -> Result<String, WalletError> {
        let signature = sign(&self.key, digest);
        if signature.is_empty() {
            return Err(WalletError::Signing("the key could not sign".into()));
        }
        Ok(signature)
    }
}

impl VoucherClaim {
    /// A claim row of `voucher` on `channel` for the cumulative `total_claimed`.
    pub fn new(channel: &ChannelConfig, voucher: &SignedVoucher, total_claimed: u128) -> Self {
        Self {
            voucher: super::wire::ClaimedVoucher {
                channel: channel.clone(),
                max_claimable_amount: voucher.max_claimable_amount.clone(),
            },
            signature: voucher.signature.clone(),
            total_claimed: total_claimed.to_string(),
        }
    }
}

fn from_config(config: &ChannelConfig) -> Result<typed::ChannelConfig, WalletError> {
    typed_config(config).map_err(|e| WalletError::Unsignable(e.to_string()))
}

fn chain_id(network: &Network) -> Result<u64, WalletError> {
    network
        .evm_chain_id()
        .ok_or_else(|| WalletError::Unsignable(format!("network `{network}` is not an EVM chain")))
}

fn parse_id(text: &str) -> Result<B256, WalletError> {
    text.strip_prefix("0x")
        .filter(|digits| digits.len() == 64)
        .and_then(|_| text.parse::<B256>().ok())
        .ok_or_else(|| {
            WalletError::Unsignable(format!("channel id `{text}` is not 32 bytes of hex"))
        })
}

fn payment(
    accept: &PaymentRequirements,
    payload: &BatchPayload,
) -> Result<PaymentPayload, WalletError> {
    Ok(PaymentPayload {
        x402_version: X402Version::V2,
        resource: None,
        accepted: accept.clone(),
        payload: serde_json::value::to_raw_value(payload)
            .map_err(|e| WalletError::Unsignable(e.to_string()))?,
        extensions: None,
    })
}
