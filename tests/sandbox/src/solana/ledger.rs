//! The sandbox's stand-in for Solana: SPL token balances, the transactions applied, the
//! blockhashes handed out, behind one lock so that a transfer's checks and effects are one step.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use sha2::{Digest as _, Sha256};
use tower_x402_solana::Pubkey;
use x402_wire::{AtomicAmount, Network};

/// How long a blockhash the sandbox handed out stays valid, in seconds (about a real one's
/// 150 blocks).
pub(crate) const BLOCKHASH_LIFETIME_SECS: u64 = 90;

/// One Solana transfer the sandbox applied: what the transaction did on chain.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SolanaSettlement {
    /// The network it landed on.
    pub network: Network,
    /// The mint (base58).
    pub mint: String,
    /// The payer: the transfer's authority (base58).
    pub payer: String,
    /// The token account debited (base58).
    pub source: String,
    /// The token account credited (base58).
    pub destination: String,
    /// The amount moved, in atomic units.
    pub amount: AtomicAmount,
    /// The transaction's id: the fee payer's signature, base58.
    pub transaction: String,
    /// The slot it landed in.
    pub slot: u64,
    /// The fully signed transaction, base64.
    pub wire: String,
    /// Every account key of its message (base58), for address searches.
    pub(crate) accounts: Vec<Pubkey>,
    /// SHA-256 of its message.
    pub(crate) message_hash: [u8; 32],
}

/// A token account the sandbox knows: whose, and of which mint.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TokenAccount {
    pub(crate) owner: Pubkey,
    pub(crate) mint: Pubkey,
}

#[derive(Debug, Default)]
struct State {
    /// Balances of the token accounts touched so far; any other holds the starting balance.
    balances: HashMap<Pubkey, u128>,
    accounts: HashMap<Pubkey, TokenAccount>,
    applied: HashSet<[u8; 32]>,
    settlements: Vec<SolanaSettlement>,
    /// Blockhash → the time it was handed out.
    blockhashes: HashMap<[u8; 32], u64>,
    slot: u64,
}

/// The SPL-token ledger.
#[derive(Debug, Default)]
pub(crate) struct SplLedger {
    state: Mutex<State>,
}

/// What a transfer is refused for by the ledger.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LedgerRefusal {
    /// The transaction was applied before.
    Applied,
    /// The source holds less than the amount.
    Insufficient(u128),
    /// The destination's balance would overflow.
    Overflow,
}

/// A transfer to apply.
pub(crate) struct Transfer {
    pub(crate) payer: Pubkey,
    pub(crate) mint: Pubkey,
    pub(crate) source: Pubkey,
    pub(crate) destination: Pubkey,
    pub(crate) destination_owner: Pubkey,
    pub(crate) amount: u64,
    pub(crate) message_hash: [u8; 32],
}

impl SplLedger {
    /// Every operation leaves the state consistent before it can panic.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn balance(&self, account: &Pubkey, starting: u128) -> u128 {
        self.lock()
            .balances
            .get(account)
            .copied()
            .unwrap_or(starting)
    }

    pub(crate) fn set_balance(&self, account: Pubkey, balance: u128) {
        self.lock().balances.insert(account, balance);
    }

    pub(crate) fn token_account(&self, account: &Pubkey) -> Option<TokenAccount> {
        self.lock().accounts.get(account).copied()
    }

    /// Remembers `account` as `owner`'s account of `mint` (for `getAccountInfo`).
    pub(crate) fn know(&self, account: Pubkey, owner: Pubkey, mint: Pubkey) {
        self.lock()
            .accounts
            .insert(account, TokenAccount { owner, mint });
    }

    pub(crate) fn settlements(&self) -> Vec<SolanaSettlement> {
        self.lock().settlements.clone()
    }

    pub(crate) fn slot(&self) -> u64 {
        self.lock().slot
    }

    /// A new blockhash, handed out at `now`: the next slot's.
    pub(crate) fn new_blockhash(&self, now: u64) -> ([u8; 32], u64) {
        let mut state = self.lock();
        state.slot += 1;
        let mut hasher = Sha256::new();
        hasher.update(b"tower-x402 sandbox blockhash");
        hasher.update(state.slot.to_le_bytes());
        hasher.update(rand::random::<[u8; 16]>());
        let blockhash: [u8; 32] = hasher.finalize().into();
        state.blockhashes.insert(blockhash, now);
        (blockhash, state.slot)
    }

    /// Whether `blockhash` can still carry a transaction at `now`: one the sandbox handed out
    /// less than [`BLOCKHASH_LIFETIME_SECS`] ago, or one it never handed out (a buyer without
    /// access to the sandbox's RPC picks its own; the sandbox cannot tell it from a real one).
    pub(crate) fn blockhash_valid(&self, blockhash: &[u8; 32], now: u64) -> bool {
        self.lock()
            .blockhashes
            .get(blockhash)
            .is_none_or(|issued| now.saturating_sub(*issued) < BLOCKHASH_LIFETIME_SECS)
    }

    /// The checks of `/verify`; changes nothing.
    pub(crate) fn check(&self, transfer: &Transfer, starting: u128) -> Result<(), LedgerRefusal> {
        self.lock().check(transfer, starting)
    }

    /// Checks and applies `transfer` in one step, recording `settlement`.
    pub(crate) fn apply(
        &self,
        transfer: &Transfer,
        starting: u128,
        settle: impl FnOnce(u64) -> SolanaSettlement,
    ) -> Result<SolanaSettlement, LedgerRefusal> {
        let mut state = self.lock();
        state.check(transfer, starting)?;
        let amount = u128::from(transfer.amount);
        let source = state.balance(&transfer.source, starting) - amount;
        if transfer.source != transfer.destination {
            let destination = state
                .balance(&transfer.destination, starting)
                .checked_add(amount)
                .ok_or(LedgerRefusal::Overflow)?;
            state.balances.insert(transfer.destination, destination);
            state.balances.insert(transfer.source, source);
        }
        for (account, owner) in [
            (transfer.source, transfer.payer),
            (transfer.destination, transfer.destination_owner),
        ] {
            state.accounts.insert(
                account,
                TokenAccount {
                    owner,
                    mint: transfer.mint,
                },
            );
        }
        state.applied.insert(transfer.message_hash);
        state.slot += 1;
        let settlement = settle(state.slot);
        state.settlements.push(settlement.clone());
        Ok(settlement)
    }
}

impl State {
    fn balance(&self, account: &Pubkey, starting: u128) -> u128 {
        self.balances.get(account).copied().unwrap_or(starting)
    }

    fn check(&self, transfer: &Transfer, starting: u128) -> Result<(), LedgerRefusal> {
        if self.applied.contains(&transfer.message_hash) {
            return Err(LedgerRefusal::Applied);
        }
        let balance = self.balance(&transfer.source, starting);
        if balance < u128::from(transfer.amount) {
            return Err(LedgerRefusal::Insufficient(balance));
        }
        Ok(())
    }
}
