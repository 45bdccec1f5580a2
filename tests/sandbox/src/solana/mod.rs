//! Solana `exact` in the sandbox: the facilitator's checks of a buyer's transaction, its
//! settlement over a simulated SPL-token ledger ([`SolanaSettlement`]), the JSON-RPC a buyer's
//! client and a reconciler use (`POST /rpc/solana`), and the sandbox wallet's side
//! ([`SandboxSolanaWallet::pay`](crate::SandboxSolanaWallet::pay)).

use ed25519_dalek::SigningKey;
use tower_x402_solana::exact::{self, ExactTransfer, Expected, reason};
use tower_x402_solana::{Pubkey, Transaction, is_solana, payload_transaction};
use x402_wire::{
    AtomicAmount, FacilitatorRequest, Network, SettleResponse, UsdcDeployment, VerifyResponse,
    X402Version,
};

use crate::SandboxFacilitator;
use crate::verify::{Rejection, Signatures};

mod ledger;
pub(crate) mod rpc;
mod wallet;

pub use ledger::SolanaSettlement;
pub(crate) use ledger::SplLedger;
use ledger::{LedgerRefusal, Transfer};

/// The USDC mints the sandbox settles on Solana.
pub(crate) const DEPLOYMENTS: [&UsdcDeployment; 2] =
    [&UsdcDeployment::SOLANA, &UsdcDeployment::SOLANA_DEVNET];

/// The sandbox's Solana side: the fee payer's key and the SPL-token ledger.
pub(crate) struct SolanaState {
    pub(crate) fee_payer: SigningKey,
    pub(crate) ledger: SplLedger,
}

impl SolanaState {
    pub(crate) fn new() -> Self {
        Self {
            fee_payer: SigningKey::from_bytes(&rand::random::<[u8; 32]>()),
            ledger: SplLedger::default(),
        }
    }

    pub(crate) fn fee_payer(&self) -> Pubkey {
        Pubkey(self.fee_payer.verifying_key().to_bytes())
    }
}

/// Whether `request` pays on a Solana network.
pub(crate) fn is_solana_request(request: &FacilitatorRequest) -> bool {
    is_solana(&request.payment_requirements().network)
}

/// A Solana payment that passed every check but the ledger's.
struct Checked {
    transaction: Transaction,
    transfer: ExactTransfer,
    pay_to: Pubkey,
}

impl Checked {
    fn ledger_transfer(&self) -> Transfer {
        Transfer {
            payer: self.transfer.payer,
            mint: self.transfer.mint,
            source: self.transfer.source,
            destination: self.transfer.destination,
            destination_owner: self.pay_to,
            amount: self.transfer.amount,
            message_hash: self.transaction.message_hash(),
        }
    }
}

fn from_refused(refused: exact::Refused) -> Rejection {
    Rejection::new(refused.reason, refused.message).payer(refused.payer.map(|p| p.to_string()))
}

impl SandboxFacilitator {
    /// The fee payer this facilitator lists as `extra.feePayer` for `exact` on Solana (base58).
    pub fn solana_fee_payer(&self) -> String {
        self.inner.solana.fee_payer().to_string()
    }

    /// Every Solana transfer that landed, oldest first.
    pub fn solana_settlements(&self) -> Vec<SolanaSettlement> {
        self.inner.solana.ledger.settlements()
    }

    /// The balance of `owner`'s associated token account for `mint` (both base58), in atomic
    /// units: the starting balance until a transfer touches it; nothing for a string that is not
    /// an address.
    pub fn solana_balance_of(&self, owner: &str, mint: &str) -> AtomicAmount {
        let (Ok(owner), Ok(mint)) = (owner.parse::<Pubkey>(), mint.parse::<Pubkey>()) else {
            return AtomicAmount(0);
        };
        let account =
            Pubkey::associated_token_address(&owner, &mint, &tower_x402_solana::TOKEN_PROGRAM);
        AtomicAmount(
            self.inner
                .solana
                .ledger
                .balance(&account, self.inner.ledger.starting_balance()),
        )
    }

    /// Sets the balance of `owner`'s associated token account for `mint` (both base58).
    ///
    /// # Errors
    ///
    /// When either is not a Solana address.
    pub fn set_solana_balance(
        &self,
        owner: &str,
        mint: &str,
        balance: AtomicAmount,
    ) -> Result<(), tower_x402_solana::InvalidPubkey> {
        let (owner, mint) = (owner.parse::<Pubkey>()?, mint.parse::<Pubkey>()?);
        let account =
            Pubkey::associated_token_address(&owner, &mint, &tower_x402_solana::TOKEN_PROGRAM);
        self.inner.solana.ledger.set_balance(account, balance.get());
        Ok(())
    }

    /// An `exact` USDC requirement on `usdc`'s Solana network for `amount` atomic units paid to
    /// `pay_to`, with this facilitator's `extra.feePayer`.
    pub fn solana_requirement(
        &self,
        usdc: &UsdcDeployment,
        amount: AtomicAmount,
        pay_to: &str,
    ) -> x402_wire::PaymentRequirements {
        let extra = serde_json::Map::from_iter([(
            "feePayer".to_owned(),
            serde_json::Value::String(self.solana_fee_payer()),
        )]);
        x402_wire::PaymentRequirements {
            scheme: "exact".to_owned(),
            network: usdc.network.clone(),
            amount,
            asset: usdc.asset.to_owned(),
            pay_to: pay_to.to_owned(),
            max_timeout_seconds: 60,
            extra: Some(extra),
        }
    }

    /// Every check of a Solana payment but the ledger's, in the official facilitator's order.
    fn check_solana(
        &self,
        request: &FacilitatorRequest,
        signatures: Signatures,
    ) -> Result<Checked, Rejection> {
        let payload = request.payment_payload();
        let requirements = request.payment_requirements();
        if payload.x402_version != X402Version::V2 || request.x402_version() != X402Version::V2 {
            return Err(Rejection::new(
                crate::reason::INVALID_X402_VERSION,
                "the sandbox speaks x402 version 2",
            ));
        }
        if payload.accepted.scheme != "exact" || requirements.scheme != "exact" {
            return Err(Rejection::new(
                "unsupported_scheme",
                "only `exact` is supported on Solana",
            ));
        }
        if payload.accepted.network != requirements.network {
            return Err(Rejection::new(
                "network_mismatch",
                format!(
                    "accepted network {} differs from the required {}",
                    payload.accepted.network, requirements.network
                ),
            ));
        }
        let deployment = DEPLOYMENTS
            .into_iter()
            .find(|usdc| usdc.network == requirements.network)
            .ok_or_else(|| {
                Rejection::new(
                    crate::reason::INVALID_NETWORK,
                    format!(
                        "network {} is not supported; the sandbox settles Solana on {} and {}",
                        requirements.network,
                        Network::SOLANA,
                        Network::SOLANA_DEVNET
                    ),
                )
            })?;
        let extra = requirements.extra.as_ref();
        let fee_payer = extra
            .and_then(|extra| extra.get("feePayer"))
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| {
                Rejection::new(
                    reason::FEE_PAYER_MISSING,
                    "the requirement has no extra.feePayer",
                )
            })?;
        if fee_payer != self.solana_fee_payer() {
            return Err(Rejection::new(
                reason::FEE_PAYER_NOT_MANAGED,
                format!(
                    "extra.feePayer {fee_payer} is not this facilitator's {}",
                    self.solana_fee_payer()
                ),
            ));
        }
        let invalid_requirement = |what: &str, value: &str| {
            Rejection::new(
                crate::reason::INVALID_PAYMENT_REQUIREMENTS,
                format!("{what} `{value}` is not a Solana address"),
            )
        };
        let mint: Pubkey = requirements
            .asset
            .parse()
            .map_err(|_| invalid_requirement("asset", &requirements.asset))?;
        let pay_to: Pubkey = requirements
            .pay_to
            .parse()
            .map_err(|_| invalid_requirement("payTo", &requirements.pay_to))?;
        let amount = u64::try_from(requirements.amount.get()).map_err(|_| {
            Rejection::new(
                crate::reason::INVALID_PAYMENT_REQUIREMENTS,
                "amount does not fit a u64",
            )
        })?;
        let transaction = payload_transaction(payload)
            .map_err(|error| Rejection::new(reason::TRANSACTION_DECODE_FAILED, error.0))?;
        let transfer = ExactTransfer::read(&transaction).map_err(from_refused)?;
        let expected = Expected {
            fee_payer: self.inner.solana.fee_payer(),
            // A mint the sandbox does not hold is refused as the chain refuses an unknown one.
            mint: deployment.asset.parse().unwrap_or(mint),
            pay_to,
            amount,
            decimals: deployment.decimals,
            memo: extra
                .and_then(|extra| extra.get("memo"))
                .and_then(serde_json::Value::as_str),
            signatures: signatures == Signatures::Recover,
        };
        if mint != expected.mint {
            return Err(Rejection::new(
                reason::MINT_MISMATCH,
                format!(
                    "asset {mint} is not USDC on {} ({})",
                    deployment.network, deployment.asset
                ),
            ));
        }
        transfer
            .check(&transaction, &expected)
            .map_err(from_refused)?;
        if !self
            .inner
            .solana
            .ledger
            .blockhash_valid(&transaction.message.recent_blockhash, self.now())
        {
            return Err(Rejection::new(
                reason::SIMULATION_FAILED,
                "blockhash not found: the transaction's blockhash expired",
            )
            .payer(Some(transfer.payer.to_string())));
        }
        // Both token accounts exist on the simulated chain from now on (`getAccountInfo`).
        let ledger = &self.inner.solana.ledger;
        ledger.know(transfer.source, transfer.payer, transfer.mint);
        ledger.know(transfer.destination, pay_to, transfer.mint);
        Ok(Checked {
            transaction,
            transfer,
            pay_to,
        })
    }

    pub(crate) fn verify_solana(
        &self,
        request: &FacilitatorRequest,
        signatures: Signatures,
    ) -> VerifyResponse {
        let starting = self.inner.ledger.starting_balance();
        let outcome = self.check_solana(request, signatures).and_then(|checked| {
            let payer = checked.transfer.payer.to_string();
            self.inner
                .solana
                .ledger
                .check(&checked.ledger_transfer(), starting)
                .map_err(|refusal| ledger_rejection(&refusal, false).payer(Some(payer.clone())))?;
            Ok(payer)
        });
        match outcome {
            Ok(payer) => VerifyResponse {
                is_valid: true,
                payer: Some(payer),
                ..VerifyResponse::default()
            },
            Err(rejection) => {
                tracing::debug!(reason = rejection.reason, message = %rejection.message, "sandbox Solana verify refused");
                VerifyResponse {
                    is_valid: false,
                    invalid_reason: Some(rejection.reason.to_owned()),
                    invalid_message: Some(rejection.message),
                    payer: rejection.payer,
                    extensions: None,
                    extra: None,
                }
            }
        }
    }

    pub(crate) fn settle_solana(
        &self,
        request: &FacilitatorRequest,
        signatures: Signatures,
    ) -> SettleResponse {
        let network = request.payment_requirements().network.clone();
        let starting = self.inner.ledger.starting_balance();
        let outcome = self.check_solana(request, signatures).and_then(|checked| {
            let payer = checked.transfer.payer.to_string();
            let mut signed = checked.transaction.clone();
            // The fee payer is the message's first account, a required signer.
            let _ = signed.sign(&self.inner.solana.fee_payer);
            let transfer = &checked.transfer;
            self.inner
                .solana
                .ledger
                .apply(&checked.ledger_transfer(), starting, |slot| {
                    SolanaSettlement {
                        network: network.clone(),
                        mint: transfer.mint.to_string(),
                        payer: payer.clone(),
                        source: transfer.source.to_string(),
                        destination: transfer.destination.to_string(),
                        amount: AtomicAmount(u128::from(transfer.amount)),
                        transaction: signed.id().unwrap_or_default(),
                        slot,
                        wire: signed.to_base64(),
                        accounts: signed.message.account_keys.clone(),
                        message_hash: signed.message_hash(),
                    }
                })
                .map_err(|refusal| ledger_rejection(&refusal, true).payer(Some(payer.clone())))
        });
        match outcome {
            Ok(settlement) => SettleResponse {
                success: true,
                error_reason: None,
                error_message: None,
                payer: Some(settlement.payer),
                transaction: settlement.transaction,
                network,
                amount: Some(settlement.amount),
                extensions: None,
                extra: None,
            },
            Err(rejection) => {
                tracing::debug!(reason = rejection.reason, message = %rejection.message, "sandbox Solana settle refused");
                let mut response = SettleResponse::failure(network, rejection.reason);
                response.error_message = Some(rejection.message);
                response.payer = rejection.payer;
                response
            }
        }
    }

    /// The settlement of the transaction in `request`, when it landed.
    pub(crate) fn solana_settlement_of(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<Option<SolanaSettlement>, String> {
        let transaction =
            payload_transaction(request.payment_payload()).map_err(|error| error.to_string())?;
        let hash = transaction.message_hash();
        Ok(self
            .solana_settlements()
            .into_iter()
            .find(|settlement| settlement.message_hash == hash))
    }
}

fn ledger_rejection(refusal: &LedgerRefusal, settling: bool) -> Rejection {
    match refusal {
        LedgerRefusal::Applied if settling => Rejection::new(
            reason::DUPLICATE_SETTLEMENT,
            "this transaction was settled already",
        ),
        LedgerRefusal::Applied => Rejection::new(
            reason::SIMULATION_FAILED,
            "this transaction has already been processed",
        ),
        LedgerRefusal::Insufficient(balance) => Rejection::new(
            reason::SIMULATION_FAILED,
            format!("insufficient funds: the source holds {balance}"),
        ),
        LedgerRefusal::Overflow => Rejection::new(
            reason::SIMULATION_FAILED,
            "the destination's balance would overflow",
        ),
    }
}
