//! [`SandboxFacilitator`]: verifies real EIP-3009 signatures and settles into an in-memory ledger.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use alloy_primitives::Address;
use tower_x402::BoxFuture;
use tower_x402::facilitator::{Endpoint, Facilitator, FacilitatorError};
use x402_wire::{
    AtomicAmount, FacilitatorRequest, SettleResponse, SupportedKind, SupportedResponse,
    UPTO_SCHEME, VerifyResponse, X402Version,
};

use crate::clock::{self, Clock};
use crate::eip712::parse_address;
use crate::ledger::{Ledger, SandboxSettlement};
use crate::script::{Reply, Script, Step};
use crate::verify::{self, DEPLOYMENTS, Rejection, Signatures};

/// What every address holds before its first transfer: 1,000 USDC.
pub(crate) const DEFAULT_STARTING_BALANCE: AtomicAmount = AtomicAmount(1_000_000_000);

/// A string that is not a `0x` address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a 0x-prefixed 20-byte address")]
pub struct InvalidAddress(pub String);

/// A stand-in facilitator with real cryptography and no chain.
///
/// It supports scheme `exact` with EIP-3009 and scheme `upto` with Permit2 (a
/// `PermitWitnessTransferFrom` whose witness names this facilitator, settled for the
/// requirement's `amount`, at most the permitted maximum, once per Permit2 nonce; zero moves
/// nothing), and scheme `batch-settlement` (payment channels over a simulated
/// `x402BatchSettlement` contract, see [`batch`](crate::batch)) on Base (`eip155:8453`) and Base
/// Sepolia (`eip155:84532`), using the USDC deployments and EIP-712 domains of
/// [`UsdcDeployment`](x402_wire::UsdcDeployment). Verification recovers the signer of the
/// EIP-712 `TransferWithAuthorization` digest and applies the reference facilitator's checks in
/// its order (see [`reason`](crate::reason)); settlement re-verifies and then moves funds in an
/// in-memory ledger where every address starts with 1,000 USDC (1,000,000,000 atomic units) (or the amount
/// set with [`with_starting_balance`](Self::with_starting_balance)).
///
/// Each `/verify` and `/settle` call through HTTP ([`router`](Self::router), [`serve`](Self::serve))
/// or through the [`Facilitator`] implementation follows a script of [`Step`]s: by default the
/// sandbox's own answer ([`Step::Answer`]); [`with_verify`](Self::with_verify) and
/// [`with_settle`](Self::with_settle) change the standing step, and
/// [`queue_verify`](Self::queue_verify) and [`queue_settle`](Self::queue_settle) script the next
/// calls one by one (a lost answer, a 503, a delay…). [`verify_payment`](Self::verify_payment)
/// and [`settle_payment`](Self::settle_payment) are the sandbox's answer without the script.
///
/// It also settles `exact` on Solana mainnet and devnet (a version-0 transaction signed by the
/// buyer with ed25519, checked as the official SVM facilitator does and applied once over a
/// simulated SPL-token ledger, its fee payer [`solana_fee_payer`](Self::solana_fee_payer)), and
/// its [`router`](Self::router) answers Solana JSON-RPC at `POST /rpc/solana`.
///
/// Cloning is cheap and clones share the ledger and the script. Hand it to
/// [`X402Layer`](tower_x402::X402Layer) directly, or serve it over HTTP.
///
/// ```
/// use x402_wire::AtomicAmount;
/// use tower_x402_sandbox::SandboxFacilitator;
///
/// let facilitator = SandboxFacilitator::new()
///     .with_clock(|| 1_740_672_100)
///     .with_starting_balance(AtomicAmount(5_000_000));
/// assert_eq!(facilitator.now(), 1_740_672_100);
/// assert_eq!(facilitator.balance_of("0x857b06519E91e3A54538791bDbb0E22373e36b66"), AtomicAmount(5_000_000));
/// assert_eq!(facilitator.settlement_count(), 0);
/// ```
#[derive(Clone)]
pub struct SandboxFacilitator {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    clock: RwLock<Clock>,
    pub(crate) ledger: Ledger,
    signer: Address,
    supported: Arc<SupportedResponse>,
    script: Script,
    /// The `batch-settlement` contract and receiver-authorizer key.
    pub(crate) batch: crate::batch::BatchState,
    /// Smart-contract wallets on the chain view: wallet address → owner key's address.
    pub(crate) contract_wallets: RwLock<std::collections::HashMap<Address, Address>>,
    /// Solana: the fee payer and the SPL-token ledger.
    pub(crate) solana: crate::solana::SolanaState,
}

impl SandboxFacilitator {
    /// A facilitator on the system clock, with an empty ledger and a random signer address.
    pub fn new() -> Self {
        let signer = Address::from(rand::random::<[u8; 20]>());
        let facilitator_address = serde_json::Map::from_iter([(
            "facilitatorAddress".to_owned(),
            serde_json::Value::String(signer.to_checksum(None)),
        )]);
        let exact = DEPLOYMENTS.iter().map(|usdc| SupportedKind {
            x402_version: X402Version::V2,
            scheme: "exact".to_owned(),
            network: usdc.network.clone(),
            extra: None,
        });
        let upto = DEPLOYMENTS.iter().map(|usdc| SupportedKind {
            x402_version: X402Version::V2,
            scheme: UPTO_SCHEME.to_owned(),
            network: usdc.network.clone(),
            extra: Some(facilitator_address.clone()),
        });
        let batch = crate::batch::BatchState::new();
        let receiver_authorizer = serde_json::Map::from_iter([(
            "receiverAuthorizer".to_owned(),
            serde_json::Value::String(
                Address::from_private_key(&batch.authorizer).to_checksum(None),
            ),
        )]);
        let channels = DEPLOYMENTS.iter().map(|usdc| SupportedKind {
            x402_version: X402Version::V2,
            scheme: crate::batch::BATCH_SETTLEMENT_SCHEME.to_owned(),
            network: usdc.network.clone(),
            extra: Some(receiver_authorizer.clone()),
        });
        let solana = crate::solana::SolanaState::new();
        let fee_payer = solana.fee_payer().to_string();
        let solana_exact = crate::solana::DEPLOYMENTS.iter().map(|usdc| SupportedKind {
            x402_version: X402Version::V2,
            scheme: "exact".to_owned(),
            network: usdc.network.clone(),
            extra: Some(serde_json::Map::from_iter([(
                "feePayer".to_owned(),
                serde_json::Value::String(fee_payer.clone()),
            )])),
        });
        let kinds = exact
            .chain(upto)
            .chain(channels)
            .chain(solana_exact)
            .collect();
        let ledger = Ledger::new(DEFAULT_STARTING_BALANCE);
        // The contract holds exactly what was deposited into it.
        ledger.set_balance(crate::batch::BATCH_SETTLEMENT, AtomicAmount(0));
        let signers = BTreeMap::from([
            ("eip155:*".to_owned(), vec![signer.to_checksum(None)]),
            ("solana:*".to_owned(), vec![fee_payer]),
        ]);
        Self {
            inner: Arc::new(Inner {
                clock: RwLock::new(clock::system_clock()),
                ledger,
                signer,
                supported: Arc::new(SupportedResponse {
                    kinds,
                    extensions: Vec::new(),
                    signers,
                }),
                script: Script::default(),
                batch,
                contract_wallets: RwLock::default(),
                solana,
            }),
        }
    }

    /// Deploys a smart-contract wallet owned by the key of `owner` on the chain view
    /// ([`rpc_router`](Self::rpc_router)) and answers its address: its EIP-1271
    /// `isValidSignature(hash, signature)`, asked with `eth_call`, returns the magic value
    /// `0x1626ba7e` when `signature` recovers to `owner` over `hash`, else `0xffffffff`.
    ///
    /// # Errors
    ///
    /// When `owner` is not an address.
    pub fn deploy_contract_wallet(&self, owner: &str) -> Result<String, InvalidAddress> {
        let owner = parse_address(owner).ok_or_else(|| InvalidAddress(owner.to_owned()))?;
        let wallet = Address::from(rand::random::<[u8; 20]>());
        self.inner
            .contract_wallets
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(wallet, owner);
        Ok(wallet.to_checksum(None))
    }

    /// Reads the time (unix seconds) from `clock` instead of the system clock, for this
    /// facilitator and every clone of it.
    #[must_use]
    pub fn with_clock(self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        *self
            .inner
            .clock
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(clock);
        self
    }

    /// What each address not yet touched by a transfer holds (default
    /// 1,000 USDC (1,000,000,000 atomic units)).
    #[must_use]
    pub fn with_starting_balance(self, balance: AtomicAmount) -> Self {
        self.inner.ledger.set_starting_balance(balance);
        self
    }

    /// Answers every `/verify` call with `step` unless one is queued (default [`Step::Answer`]),
    /// for this facilitator and every clone of it.
    ///
    /// ```
    /// use tower_x402_sandbox::{SandboxFacilitator, Step};
    ///
    /// // Valid whatever the signature; settles in the ledger, each nonce once.
    /// let trusting = SandboxFacilitator::new()
    ///     .with_verify(Step::Trust)
    ///     .with_settle(Step::Trust);
    /// # let _ = trusting;
    /// ```
    #[must_use]
    pub fn with_verify(self, step: Step) -> Self {
        self.inner.script.set_standing(Endpoint::Verify, step);
        self
    }

    /// Answers every `/settle` call with `step` unless one is queued (default [`Step::Answer`]),
    /// for this facilitator and every clone of it.
    #[must_use]
    pub fn with_settle(self, step: Step) -> Self {
        self.inner.script.set_standing(Endpoint::Settle, step);
        self
    }

    /// Queues `step` for the next `/verify` call that has no step queued before it.
    pub fn queue_verify(&self, step: Step) {
        self.inner.script.queue(Endpoint::Verify, step);
    }

    /// Queues `step` for the next `/settle` call that has no step queued before it.
    ///
    /// ```
    /// use tower_x402_sandbox::{SandboxFacilitator, Step};
    ///
    /// let facilitator = SandboxFacilitator::new();
    /// facilitator.queue_settle(Step::AnswerLost); // settles, then answers 504
    /// facilitator.queue_settle(Step::Status(503)); // then a 503 without settling
    /// assert_eq!(facilitator.settle_calls(), 0);
    /// ```
    pub fn queue_settle(&self, step: Step) {
        self.inner.script.queue(Endpoint::Settle, step);
    }

    /// How many `/verify` calls arrived through the script (over HTTP or in process).
    pub fn verify_calls(&self) -> usize {
        self.inner.script.call_count(Endpoint::Verify)
    }

    /// How many `/settle` calls arrived through the script (over HTTP or in process).
    pub fn settle_calls(&self) -> usize {
        self.inner.script.call_count(Endpoint::Settle)
    }

    pub(crate) fn script(&self) -> &Script {
        &self.inner.script
    }

    /// The current time as this facilitator sees it, in unix seconds.
    pub fn now(&self) -> u64 {
        let clock = Arc::clone(
            &self
                .inner
                .clock
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        );
        clock()
    }

    /// `/verify` without the HTTP: checks `request` against the signature, the clock and the
    /// ledger, and changes nothing.
    pub fn verify_payment(&self, request: &FacilitatorRequest) -> VerifyResponse {
        self.verify_checking(request, Signatures::Recover)
    }

    pub(crate) fn verify_checking(
        &self,
        request: &FacilitatorRequest,
        signatures: Signatures,
    ) -> VerifyResponse {
        if crate::batch::is_batch(request) {
            return crate::batch::as_verify_response(self.verify_batch(request));
        }
        if crate::solana::is_solana_request(request) {
            return self.verify_solana(request, signatures);
        }
        let outcome =
            verify::check(request, self.now(), signatures, self.inner.signer).and_then(|payment| {
                let payer = Some(payment.payer());
                self.inner
                    .ledger
                    .check(&payment)
                    .map_err(|rejection| with_payer(rejection, payer))?;
                Ok(payment.payer())
            });
        match outcome {
            Ok(payer) => VerifyResponse {
                is_valid: true,
                payer: Some(payer),
                ..VerifyResponse::default()
            },
            Err(rejection) => {
                tracing::debug!(reason = rejection.reason, message = %rejection.message, "sandbox verify refused");
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

    /// `/settle` without the HTTP: verifies `request` again and, in the same step as the nonce
    /// and balance checks, debits the payer and credits `payTo`.
    pub fn settle_payment(&self, request: &FacilitatorRequest) -> SettleResponse {
        self.settle_checking(request, Signatures::Recover)
    }

    pub(crate) fn settle_checking(
        &self,
        request: &FacilitatorRequest,
        signatures: Signatures,
    ) -> SettleResponse {
        let network = request.payment_requirements().network.clone();
        if crate::batch::is_batch(request) {
            return crate::batch::as_settle_response(self.settle_batch(request), network);
        }
        if crate::solana::is_solana_request(request) {
            return self.settle_solana(request, signatures);
        }
        let outcome =
            verify::check(request, self.now(), signatures, self.inner.signer).and_then(|payment| {
                let payer = Some(payment.payer());
                self.inner
                    .ledger
                    .settle(&payment)
                    .map_err(|rejection| with_payer(rejection, payer))
            });
        match outcome {
            Ok(settlement) => SettleResponse {
                success: true,
                error_reason: None,
                error_message: None,
                payer: Some(settlement.from),
                transaction: settlement.transaction,
                network,
                amount: Some(settlement.amount),
                extensions: None,
                extra: None,
            },
            Err(rejection) => {
                tracing::debug!(reason = rejection.reason, message = %rejection.message, "sandbox settle refused");
                let mut response = SettleResponse::failure(network, rejection.reason);
                response.error_message = Some(rejection.message);
                response.payer = rejection.payer;
                response
            }
        }
    }

    /// How many settlements succeeded.
    pub fn settlement_count(&self) -> usize {
        self.inner.ledger.settlement_count()
    }

    /// Every settlement that succeeded, oldest first.
    pub fn settlements(&self) -> Vec<SandboxSettlement> {
        self.inner.ledger.settlements()
    }

    /// The balance of `address` in USDC atomic units. The ledger holds one balance per address,
    /// shared by both networks; an address never touched holds the starting balance, and a
    /// string that is not an address holds nothing.
    pub fn balance_of(&self, address: &str) -> AtomicAmount {
        parse_address(address).map_or(AtomicAmount(0), |holder| self.inner.ledger.balance(holder))
    }

    /// Sets the balance of `address`.
    ///
    /// # Errors
    ///
    /// When `address` is not a `0x` address.
    pub fn set_balance(&self, address: &str, balance: AtomicAmount) -> Result<(), InvalidAddress> {
        let holder = parse_address(address).ok_or_else(|| InvalidAddress(address.to_owned()))?;
        self.inner.ledger.set_balance(holder, balance);
        Ok(())
    }

    /// The address this facilitator lists as its `eip155:*` signer in `/supported`.
    pub fn signer_address(&self) -> String {
        self.inner.signer.to_checksum(None)
    }

    /// The `/supported` answer: `exact`, `upto` and `batch-settlement` on both EVM networks,
    /// version 2 (`upto` with `extra.facilitatorAddress`, the signer; `batch-settlement` with
    /// `extra.receiverAuthorizer`, [`receiver_authorizer`](Self::receiver_authorizer)), `exact`
    /// on Solana mainnet and devnet with `extra.feePayer`
    /// ([`solana_fee_payer`](Self::solana_fee_payer)), and the signers (`eip155:*`, `solana:*`).
    pub fn supported_response(&self) -> Arc<SupportedResponse> {
        Arc::clone(&self.inner.supported)
    }
}

fn with_payer(mut rejection: Rejection, payer: Option<String>) -> Rejection {
    rejection.payer = payer;
    rejection
}

impl Default for SandboxFacilitator {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SandboxFacilitator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SandboxFacilitator")
            .field("signer", &self.signer_address())
            .field("settlements", &self.settlement_count())
            .finish_non_exhaustive()
    }
}

/// What an HTTP client would report for a reply that is not an answer.
fn in_process<T>(endpoint: Endpoint, reply: Reply<T>) -> Result<T, FacilitatorError> {
    match reply {
        Reply::Answer(answer) => Ok(answer),
        Reply::Status(code) => Err(FacilitatorError::Status {
            endpoint,
            status: axum::http::StatusCode::from_u16(code)
                .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR),
            body: crate::server::STATUS_BODY.into(),
            retry_after: None,
        }),
        Reply::Garbage => Err(FacilitatorError::Malformed {
            endpoint,
            message: "expected value at line 1 column 1".into(),
        }),
        Reply::Hang => Err(FacilitatorError::TimedOut {
            endpoint,
            after: std::time::Duration::ZERO,
        }),
        Reply::Drop => Err(FacilitatorError::Unreachable {
            endpoint,
            source: tower_x402::BoxError::from("connection closed before an answer").into(),
        }),
    }
}

impl Facilitator for SandboxFacilitator {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(async move { in_process(Endpoint::Verify, self.scripted_verify(request).await) })
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async move { in_process(Endpoint::Settle, self.scripted_settle(request).await) })
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        Box::pin(async move { Ok(self.supported_response()) })
    }
}
