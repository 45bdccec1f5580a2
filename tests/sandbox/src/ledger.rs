//! The sandbox's stand-in for the chain: balances, used nonces and the settlements made.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use alloy_primitives::{Address, B256, U256, keccak256};
use x402_wire::{AtomicAmount, Network};

use crate::reason;
use crate::verify::{Approval, Authorized, Rejection};

/// One settlement the sandbox performed: what a `transferWithAuthorization` transaction would
/// have done on chain.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SandboxSettlement {
    /// The network it settled on.
    pub network: Network,
    /// The token contract (EIP-55).
    pub asset: String,
    /// The payer (EIP-55).
    pub from: String,
    /// The recipient (EIP-55).
    pub to: String,
    /// The amount moved, in atomic units.
    pub amount: AtomicAmount,
    /// The authorization's nonce, `0x`-hex.
    pub nonce: String,
    /// The fake transaction hash reported to the server, `0x`-hex.
    pub transaction: String,
    /// The scheme: `exact` or `upto`.
    pub scheme: String,
    /// How the tokens moved: `eip3009` (the token's `transferWithAuthorization`) or `permit2`
    /// (Permit2's `permitWitnessTransferFrom` through the scheme's proxy, whose nonce is a
    /// uint256 written as 32 bytes of hex).
    pub transfer_method: String,
}

/// Balances, used nonces and settlements, behind one lock so that a settlement's checks and
/// effects are a single step.
#[derive(Debug)]
pub(crate) struct Ledger {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    starting_balance: u128,
    /// Balances of the addresses touched so far; any other address holds `starting_balance`.
    balances: HashMap<Address, u128>,
    used_nonces: HashSet<NonceKey>,
    settlements: Vec<SandboxSettlement>,
    /// Allowances to Permit2 set so far, per network, token and owner; any other owner has
    /// approved Permit2 for everything it holds (`U256::MAX`).
    allowances: HashMap<TokenKey, U256>,
    /// EIP-2612 nonces used so far, per network, token and owner: the next permit's nonce.
    permit_nonces: HashMap<TokenKey, U256>,
}

/// A token holder on one network: `(network, token, owner)`.
type TokenKey = (Network, Address, Address);

/// EIP-3009 nonces are per token and authorizer; Permit2 nonces per owner, in the Permit2
/// contract (whose address then takes the token's place).
type NonceKey = (Network, Address, Address, B256);

impl Ledger {
    pub(crate) fn new(starting_balance: AtomicAmount) -> Self {
        Self {
            state: Mutex::new(State {
                starting_balance: starting_balance.get(),
                balances: HashMap::new(),
                used_nonces: HashSet::new(),
                settlements: Vec::new(),
                allowances: HashMap::new(),
                permit_nonces: HashMap::new(),
            }),
        }
    }

    /// Every operation leaves the state consistent before it can panic, so a poisoned lock still
    /// guards valid data.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What an account not yet touched holds (shared by the Solana ledger).
    pub(crate) fn starting_balance(&self) -> u128 {
        self.lock().starting_balance
    }

    pub(crate) fn set_starting_balance(&self, balance: AtomicAmount) {
        self.lock().starting_balance = balance.get();
    }

    pub(crate) fn balance(&self, holder: Address) -> AtomicAmount {
        AtomicAmount(self.lock().balance(holder))
    }

    pub(crate) fn set_balance(&self, holder: Address, balance: AtomicAmount) {
        self.lock().balances.insert(holder, balance.get());
    }

    /// Sets `owner`'s allowance of `token` to Permit2, as an `approve` would.
    pub(crate) fn set_permit2_allowance(
        &self,
        network: &Network,
        token: Address,
        owner: Address,
        allowance: U256,
    ) {
        let key = (network.clone(), token, owner);
        self.lock().allowances.insert(key, allowance);
    }

    /// `owner`'s allowance of `token` to Permit2.
    pub(crate) fn permit2_allowance(
        &self,
        network: &Network,
        token: Address,
        owner: Address,
    ) -> U256 {
        self.lock().allowance(&(network.clone(), token, owner))
    }

    /// `owner`'s next EIP-2612 nonce on `token`.
    pub(crate) fn permit_nonce(&self, network: &Network, token: Address, owner: Address) -> U256 {
        let key = (network.clone(), token, owner);
        self.lock()
            .permit_nonces
            .get(&key)
            .copied()
            .unwrap_or_default()
    }

    pub(crate) fn settlements(&self) -> Vec<SandboxSettlement> {
        self.lock().settlements.clone()
    }

    pub(crate) fn settlement_count(&self) -> usize {
        self.lock().settlements.len()
    }

    /// Moves `amount` from `from` to `to` in one step with the balance check, and, when `nonce`
    /// names an EIP-3009 authorization of `from` (network, token, nonce), marks it used in the
    /// same step: a token transfer made by a contract rather than a recorded settlement.
    pub(crate) fn transfer(
        &self,
        from: Address,
        to: Address,
        amount: u128,
        nonce: Option<(Network, Address, B256)>,
    ) -> Result<(), String> {
        let mut state = self.lock();
        let key = nonce.map(|(network, token, nonce)| (network, token, from, nonce));
        if let Some(key) = &key
            && state.used_nonces.contains(key)
        {
            return Err(format!(
                "authorization nonce {} of {from} was already used",
                key.3
            ));
        }
        let balance = state.balance(from);
        if balance < amount {
            return Err(format!("{from} holds {balance}, below {amount}"));
        }
        if from != to {
            let credited = state
                .balance(to)
                .checked_add(amount)
                .ok_or_else(|| format!("the balance of {to} would overflow"))?;
            state.balances.insert(to, credited);
            state.balances.insert(from, balance - amount);
        }
        if let Some(key) = key {
            state.used_nonces.insert(key);
        }
        Ok(())
    }

    /// Whether the EIP-3009 nonce `nonce` of `from` on `token` is used.
    pub(crate) fn nonce_used(
        &self,
        network: &Network,
        token: Address,
        from: Address,
        nonce: B256,
    ) -> bool {
        self.lock()
            .used_nonces
            .contains(&(network.clone(), token, from, nonce))
    }

    #[cfg(test)]
    fn is_nonce_used(&self, network: &Network, asset: Address, from: Address, nonce: B256) -> bool {
        self.lock()
            .used_nonces
            .contains(&(network.clone(), asset, from, nonce))
    }

    /// The nonce and balance checks of `/verify`; changes nothing.
    pub(crate) fn check(&self, payment: &Authorized) -> Result<(), Rejection> {
        self.lock().check(payment)
    }

    /// Checks and performs the transfer in one step: of two settlements of the same
    /// authorization, exactly one succeeds.
    ///
    /// A Permit2 payment of zero moves nothing and leaves its nonce unused: it answers a
    /// settlement with no transaction and records none.
    pub(crate) fn settle(&self, payment: &Authorized) -> Result<SandboxSettlement, Rejection> {
        let mut state = self.lock();
        state.check(payment)?;
        if payment.scheme == x402_wire::UPTO_SCHEME && payment.amount == 0 {
            return Ok(SandboxSettlement {
                network: payment.network.clone(),
                asset: payment.asset.to_checksum(None),
                from: payment.payer(),
                to: payment.to.to_checksum(None),
                amount: AtomicAmount(0),
                nonce: payment.nonce.to_string(),
                transaction: String::new(),
                scheme: x402_wire::UPTO_SCHEME.to_owned(),
                transfer_method: x402_wire::PERMIT2_TRANSFER_METHOD.to_owned(),
            });
        }
        // `check` established that the payer covers the amount.
        let payer_balance = state.balance(payment.from) - payment.amount;
        if payment.from != payment.to {
            let recipient_balance = state
                .balance(payment.to)
                .checked_add(payment.amount)
                .ok_or_else(|| {
                    Rejection::new(
                        reason::INVALID_EXACT_EVM_TRANSACTION_FAILED,
                        "the recipient's balance would overflow",
                    )
                })?;
            state.balances.insert(payment.to, recipient_balance);
            state.balances.insert(payment.from, payer_balance);
        }
        state.used_nonces.insert(nonce_key(payment));
        if payment.permit2 {
            // The sponsored approval first, then Permit2 spends from the allowance.
            let key = (payment.network.clone(), payment.asset, payment.from);
            match &payment.approval {
                Some(Approval::Eip2612 { value, nonce }) => {
                    state.allowances.insert(key.clone(), *value);
                    state
                        .permit_nonces
                        .insert(key.clone(), nonce + U256::from(1));
                }
                Some(Approval::Erc20 { value }) => {
                    state.allowances.insert(key.clone(), *value);
                }
                None => {}
            }
            let allowance = state.allowance(&key);
            if allowance != U256::MAX {
                // `check` established that the allowance covers the amount.
                let left = allowance.saturating_sub(U256::from(payment.amount));
                state.allowances.insert(key, left);
            }
        }
        let settlement = SandboxSettlement {
            network: payment.network.clone(),
            asset: payment.asset.to_checksum(None),
            from: payment.payer(),
            to: payment.to.to_checksum(None),
            amount: AtomicAmount(payment.amount),
            nonce: payment.nonce.to_string(),
            transaction: transaction_hash(payment).to_string(),
            scheme: payment.scheme.to_owned(),
            transfer_method: if payment.permit2 {
                x402_wire::PERMIT2_TRANSFER_METHOD
            } else {
                "eip3009"
            }
            .to_owned(),
        };
        state.settlements.push(settlement.clone());
        Ok(settlement)
    }
}

impl State {
    fn balance(&self, holder: Address) -> u128 {
        self.balances
            .get(&holder)
            .copied()
            .unwrap_or(self.starting_balance)
    }

    fn allowance(&self, key: &TokenKey) -> U256 {
        self.allowances.get(key).copied().unwrap_or(U256::MAX)
    }

    /// A Permit2 payment's allowance: the one its sponsored approval sets (whose nonce must be
    /// the owner's next), else the one it has.
    fn check_allowance(&self, payment: &Authorized) -> Result<(), Rejection> {
        let key = (payment.network.clone(), payment.asset, payment.from);
        let allowance = match &payment.approval {
            Some(Approval::Eip2612 { value, nonce }) => {
                let next = self.permit_nonces.get(&key).copied().unwrap_or_default();
                if *nonce != next {
                    let message = format!(
                        "the EIP-2612 permit's nonce {nonce} is not {}'s next on the token ({next})",
                        payment.payer()
                    );
                    return Err(Rejection::new(reason::EIP2612_INVALID_SIGNATURE, message));
                }
                *value
            }
            Some(Approval::Erc20 { value }) => *value,
            None => self.allowance(&key),
        };
        if allowance < U256::from(payment.amount) {
            let message = format!(
                "{} allows Permit2 {allowance} of the token, below {}: approve Permit2 or pay with a gas-sponsoring extension",
                payment.payer(),
                payment.amount
            );
            return Err(Rejection::new(reason::PERMIT2_ALLOWANCE_REQUIRED, message));
        }
        Ok(())
    }

    fn check(&self, payment: &Authorized) -> Result<(), Rejection> {
        if self.used_nonces.contains(&nonce_key(payment)) {
            let message = format!(
                "nonce {} of {} was already used on this token",
                payment.nonce,
                payment.payer()
            );
            let code = if payment.permit2 {
                reason::PERMIT2_INVALID_NONCE
            } else {
                reason::INVALID_EXACT_EVM_NONCE_ALREADY_USED
            };
            return Err(Rejection::new(code, message));
        }
        let balance = self.balance(payment.from);
        if balance < payment.amount {
            let message = format!("balance {balance} is below the value {}", payment.amount);
            let code = if payment.permit2 {
                reason::INSUFFICIENT_FUNDS
            } else {
                reason::INVALID_EXACT_EVM_INSUFFICIENT_BALANCE
            };
            return Err(Rejection::new(code, message));
        }
        if payment.permit2 {
            self.check_allowance(payment)?;
        }
        Ok(())
    }
}

fn nonce_key(payment: &Authorized) -> NonceKey {
    (
        payment.network.clone(),
        nonce_space(payment),
        payment.from,
        payment.nonce,
    )
}

/// The contract that keeps the payment's nonce: the token, or Permit2.
fn nonce_space(payment: &Authorized) -> Address {
    if payment.permit2 {
        tower_x402_evm::permit2::PERMIT2
    } else {
        payment.asset
    }
}

/// A deterministic stand-in for the transaction hash: `keccak256(network ‖ asset ‖ from ‖ nonce)`,
/// unique because each `(network, asset, from, nonce)` settles once.
fn transaction_hash(payment: &Authorized) -> B256 {
    let network = payment.network.as_str().as_bytes();
    let mut preimage = Vec::with_capacity(network.len() + 20 + 20 + 32);
    preimage.extend_from_slice(network);
    preimage.extend_from_slice(nonce_space(payment).as_slice());
    preimage.extend_from_slice(payment.from.as_slice());
    preimage.extend_from_slice(payment.nonce.as_slice());
    keccak256(preimage)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payment(from: Address, to: Address, amount: u128, nonce: u8) -> Authorized {
        Authorized {
            network: Network::BASE_SEPOLIA,
            asset: Address::repeat_byte(0xaa),
            from,
            to,
            amount,
            nonce: B256::repeat_byte(nonce),
            permit2: false,
            scheme: "exact",
            approval: None,
        }
    }

    #[test]
    fn settling_moves_funds_once() {
        let ledger = Ledger::new(AtomicAmount(100));
        let (alice, bob) = (Address::repeat_byte(1), Address::repeat_byte(2));
        let first = payment(alice, bob, 30, 1);
        let settled = ledger.settle(&first).unwrap();
        assert_eq!(settled.amount, AtomicAmount(30));
        assert_eq!(ledger.balance(alice), AtomicAmount(70));
        assert_eq!(ledger.balance(bob), AtomicAmount(130));
        let again = ledger.settle(&first).unwrap_err();
        assert_eq!(again.reason, reason::INVALID_EXACT_EVM_NONCE_ALREADY_USED);
        assert_eq!(ledger.balance(alice), AtomicAmount(70));
        assert_eq!(ledger.settlement_count(), 1);
        assert!(ledger.is_nonce_used(&Network::BASE_SEPOLIA, first.asset, alice, first.nonce));
        assert!(
            !ledger.is_nonce_used(&Network::BASE, first.asset, alice, first.nonce),
            "nonces are per network"
        );
    }

    #[test]
    fn refuses_what_the_payer_cannot_cover_and_changes_nothing() {
        let ledger = Ledger::new(AtomicAmount(10));
        let (alice, bob) = (Address::repeat_byte(1), Address::repeat_byte(2));
        let error = ledger.settle(&payment(alice, bob, 11, 1)).unwrap_err();
        assert_eq!(error.reason, reason::INVALID_EXACT_EVM_INSUFFICIENT_BALANCE);
        ledger.set_balance(bob, AtomicAmount(u128::MAX));
        let overflow = ledger.settle(&payment(alice, bob, 5, 2)).unwrap_err();
        assert_eq!(
            overflow.reason,
            reason::INVALID_EXACT_EVM_TRANSACTION_FAILED
        );
        assert_eq!(ledger.balance(alice), AtomicAmount(10));
        assert_eq!(ledger.settlement_count(), 0);
        // A payment to oneself only uses the nonce.
        ledger.settle(&payment(alice, alice, 10, 3)).unwrap();
        assert_eq!(ledger.balance(alice), AtomicAmount(10));
    }

    #[test]
    fn transaction_hashes_are_deterministic_and_distinct() {
        let (alice, bob) = (Address::repeat_byte(1), Address::repeat_byte(2));
        let one = transaction_hash(&payment(alice, bob, 1, 1));
        assert_eq!(one, transaction_hash(&payment(alice, bob, 1, 1)));
        assert_ne!(one, transaction_hash(&payment(alice, bob, 1, 2)));
        assert_eq!(one.to_string().len(), 66);
    }
}
