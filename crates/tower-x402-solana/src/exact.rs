//! The `exact` scheme's Solana transaction: built and signed by a buyer ([`build`]), read back
//! into the transfer it makes ([`ExactTransfer::read`]) and held to a requirement
//! ([`ExactTransfer::check`]) by a facilitator, with the official reason codes ([`reason`]).
//!
//! The layout is the x402 specification's: `SetComputeUnitLimit`, `SetComputeUnitPrice`, one
//! SPL Token or Token-2022 `TransferChecked`, then at most three Lighthouse or Memo
//! instructions. The buyer's transaction leaves the fee payer's signature (the first) empty for
//! the facilitator.

use ed25519_dalek::SigningKey;

use crate::pubkey::{
    COMPUTE_BUDGET_PROGRAM, LIGHTHOUSE_PROGRAM, MEMO_PROGRAM, Pubkey, TOKEN_2022_PROGRAM,
    TOKEN_PROGRAM,
};
use crate::transaction::{Instruction, Message, Transaction};

/// The reason codes of the official SVM facilitator.
pub mod reason {
    /// The payload has no decodable `transaction`.
    pub const TRANSACTION_DECODE_FAILED: &str =
        "invalid_exact_svm_payload_transaction_could_not_be_decoded";
    /// Fewer than 3 or more than 6 instructions.
    pub const INSTRUCTION_COUNT: &str = "invalid_exact_svm_payload_transaction_instructions_length";
    /// The first instruction is not `SetComputeUnitLimit`.
    pub const COMPUTE_LIMIT: &str =
        "invalid_exact_svm_payload_transaction_instructions_compute_limit_instruction";
    /// The second instruction is not `SetComputeUnitPrice`.
    pub const COMPUTE_PRICE: &str =
        "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction";
    /// The compute unit price is above 5 lamports.
    pub const COMPUTE_PRICE_TOO_HIGH: &str =
        "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction_too_high";
    /// The third instruction is not a `TransferChecked`.
    pub const NO_TRANSFER: &str = "invalid_exact_svm_payload_no_transfer_instruction";
    /// An optional instruction of another program, by position.
    pub const UNKNOWN_INSTRUCTION: [&str; 3] = [
        "invalid_exact_svm_payload_unknown_fourth_instruction",
        "invalid_exact_svm_payload_unknown_fifth_instruction",
        "invalid_exact_svm_payload_unknown_sixth_instruction",
    ];
    /// The transfer's mint is not the requirement's asset.
    pub const MINT_MISMATCH: &str = "invalid_exact_svm_payload_mint_mismatch";
    /// The destination is not `payTo`'s associated token account.
    pub const RECIPIENT_MISMATCH: &str = "invalid_exact_svm_payload_recipient_mismatch";
    /// The amount is not the requirement's.
    pub const AMOUNT: &str = "invalid_exact_svm_payload_amount_insufficient";
    /// The requirement names no `extra.feePayer`, or the transaction another fee payer.
    pub const FEE_PAYER_MISSING: &str = "invalid_exact_svm_payload_missing_fee_payer";
    /// The fee payer is not the facilitator's.
    pub const FEE_PAYER_NOT_MANAGED: &str = "fee_payer_not_managed_by_facilitator";
    /// The fee payer appears in an instruction's accounts.
    pub const FEE_PAYER_TRANSFERRING: &str =
        "invalid_exact_svm_payload_transaction_fee_payer_transferring_funds";
    /// `extra.memo` is set and the transaction has not exactly one Memo instruction.
    pub const MEMO_COUNT: &str = "invalid_exact_svm_payload_memo_count";
    /// `extra.memo` is set and the Memo instruction says something else.
    pub const MEMO_MISMATCH: &str = "invalid_exact_svm_payload_memo_mismatch";
    /// What the chain would refuse: a signature, the decimals, a balance, a transaction already
    /// processed.
    pub const SIMULATION_FAILED: &str = "transaction_simulation_failed";
    /// The transaction was already settled.
    pub const DUPLICATE_SETTLEMENT: &str = "duplicate_settlement";
}

/// The highest compute unit price allowed, in micro-lamports (5 lamports).
pub const MAX_COMPUTE_UNIT_PRICE: u64 = 5_000_000;
/// The compute unit limit a buyer sets.
pub const COMPUTE_UNIT_LIMIT: u32 = 20_000;
/// The compute unit price a buyer sets, in micro-lamports.
pub const COMPUTE_UNIT_PRICE: u64 = 1;

/// A transaction refused, with its reason code, why, and the payer when it is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The reason code ([`reason`]).
    pub reason: &'static str,
    /// Why, for people.
    pub message: String,
    /// The transfer's authority, when the transfer was read.
    pub payer: Option<Pubkey>,
}

impl Refused {
    fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            payer: None,
        }
    }
}

/// What a buyer's transaction pays: the inputs of [`build`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferSpec {
    /// The facilitator's fee payer (`extra.feePayer`).
    pub fee_payer: Pubkey,
    /// The token mint (`asset`).
    pub mint: Pubkey,
    /// The recipient's wallet (`payTo`); the transfer goes to its associated token account.
    pub pay_to: Pubkey,
    /// The amount in atomic units.
    pub amount: u64,
    /// The mint's decimals.
    pub decimals: u8,
    /// The mint's token program.
    pub token_program: Pubkey,
    /// A recent blockhash.
    pub recent_blockhash: [u8; 32],
    /// The Memo instruction's data: `extra.memo`, or a random nonce (hex) that keeps two
    /// payments of the same amount apart.
    pub memo: Vec<u8>,
}

/// The version-0 transaction paying `spec` from `payer`'s associated token account, signed by
/// `payer`, the fee payer's signature left empty (zeros).
pub fn build(spec: &TransferSpec, payer: &SigningKey) -> Transaction {
    let authority = Pubkey(payer.verifying_key().to_bytes());
    let source = Pubkey::associated_token_address(&authority, &spec.mint, &spec.token_program);
    let destination =
        Pubkey::associated_token_address(&spec.pay_to, &spec.mint, &spec.token_program);
    let mut compiler = Compiler::default();
    compiler.meta(spec.fee_payer, true, true);
    let limit = compiler.instruction(
        COMPUTE_BUDGET_PROGRAM,
        &[],
        [&[2][..], &COMPUTE_UNIT_LIMIT.to_le_bytes()].concat(),
    );
    let price = compiler.instruction(
        COMPUTE_BUDGET_PROGRAM,
        &[],
        [&[3][..], &COMPUTE_UNIT_PRICE.to_le_bytes()].concat(),
    );
    let transfer = compiler.instruction(
        spec.token_program,
        &[
            (source, false, true),
            (spec.mint, false, false),
            (destination, false, true),
            (authority, true, false),
        ],
        [&[12][..], &spec.amount.to_le_bytes(), &[spec.decimals]].concat(),
    );
    let memo = compiler.instruction(MEMO_PROGRAM, &[], spec.memo.clone());
    let message = compiler.compile(spec.recent_blockhash, [limit, price, transfer, memo]);
    let message_bytes = message.encode();
    let mut transaction = Transaction {
        signatures: vec![[0; 64]; usize::from(message.required_signatures)],
        message,
        message_bytes,
    };
    // The authority is a required signer of the message just compiled.
    let _ = transaction.sign(payer);
    transaction
}

/// Orders account metas as Solana compiles a message: writable signers (the fee payer first),
/// read-only signers, writable non-signers, read-only non-signers.
#[derive(Default)]
struct Compiler {
    metas: Vec<(Pubkey, bool, bool)>,
}

/// An instruction before compilation: program and accounts as keys.
struct Draft {
    program: Pubkey,
    accounts: Vec<Pubkey>,
    data: Vec<u8>,
}

impl Compiler {
    fn meta(&mut self, key: Pubkey, signer: bool, writable: bool) {
        match self.metas.iter_mut().find(|meta| meta.0 == key) {
            Some(meta) => {
                meta.1 |= signer;
                meta.2 |= writable;
            }
            None => self.metas.push((key, signer, writable)),
        }
    }

    fn instruction(
        &mut self,
        program: Pubkey,
        accounts: &[(Pubkey, bool, bool)],
        data: Vec<u8>,
    ) -> Draft {
        for (key, signer, writable) in accounts {
            self.meta(*key, *signer, *writable);
        }
        self.meta(program, false, false);
        Draft {
            program,
            accounts: accounts.iter().map(|meta| meta.0).collect(),
            data,
        }
    }

    fn compile<const N: usize>(self, recent_blockhash: [u8; 32], drafts: [Draft; N]) -> Message {
        let group = |signer: bool, writable: bool| {
            self.metas
                .iter()
                .filter(move |meta| meta.1 == signer && meta.2 == writable)
                .map(|meta| meta.0)
        };
        let account_keys: Vec<Pubkey> = group(true, true)
            .chain(group(true, false))
            .chain(group(false, true))
            .chain(group(false, false))
            .collect();
        let count = |signer: bool, writable: bool| group(signer, writable).count() as u8;
        let index = |key: &Pubkey| {
            account_keys
                .iter()
                .position(|account| account == key)
                .unwrap_or_default() as u8
        };
        let instructions = drafts
            .iter()
            .map(|draft| Instruction {
                program: index(&draft.program),
                accounts: draft.accounts.iter().map(index).collect(),
                data: draft.data.clone(),
            })
            .collect();
        Message {
            versioned: true,
            required_signatures: count(true, true) + count(true, false),
            readonly_signed: count(true, false),
            readonly_unsigned: count(false, false),
            account_keys,
            recent_blockhash,
            instructions,
            lookups: Vec::new(),
        }
    }
}

/// The transfer an `exact` transaction makes, read from its instructions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExactTransfer {
    /// The message's fee payer (its first account).
    pub fee_payer: Pubkey,
    /// The transfer's authority: the payer.
    pub payer: Pubkey,
    /// The account debited.
    pub source: Pubkey,
    /// The mint.
    pub mint: Pubkey,
    /// The account credited.
    pub destination: Pubkey,
    /// The amount, in atomic units.
    pub amount: u64,
    /// The decimals the transfer states.
    pub decimals: u8,
    /// The token program (SPL Token or Token-2022).
    pub token_program: Pubkey,
    /// The compute unit price, in micro-lamports.
    pub compute_unit_price: u64,
    /// The data of each Memo instruction.
    pub memos: Vec<Vec<u8>>,
    /// The authority's index in the account keys.
    payer_index: u8,
}

/// What a requirement expects of the transfer.
#[derive(Clone, Debug)]
pub struct Expected<'a> {
    /// The facilitator's fee payer.
    pub fee_payer: Pubkey,
    /// The mint (`asset`).
    pub mint: Pubkey,
    /// The recipient's wallet (`payTo`).
    pub pay_to: Pubkey,
    /// The amount (`amount`).
    pub amount: u64,
    /// The mint's decimals.
    pub decimals: u8,
    /// `extra.memo`, when the requirement sets one.
    pub memo: Option<&'a str>,
    /// Whether the payer's signature is checked (a facilitator trusting made-up payments
    /// skips it).
    pub signatures: bool,
}

fn u64_at(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?))
}

impl ExactTransfer {
    /// Reads the transfer of `transaction`, refusing any other layout than the specification's.
    ///
    /// # Errors
    ///
    /// The first layout rule the transaction breaks, with its reason code.
    pub fn read(transaction: &Transaction) -> Result<Self, Refused> {
        let message = &transaction.message;
        let instructions = &message.instructions;
        if !(3..=6).contains(&instructions.len()) {
            return Err(Refused::new(
                reason::INSTRUCTION_COUNT,
                format!("{} instructions; 3 to 6 are allowed", instructions.len()),
            ));
        }
        let program = |ix: &Instruction| message.account(ix.program).copied().unwrap_or_default();
        let limit = &instructions[0];
        if program(limit) != COMPUTE_BUDGET_PROGRAM || limit.data.len() != 5 || limit.data[0] != 2 {
            return Err(Refused::new(
                reason::COMPUTE_LIMIT,
                "the first instruction is not SetComputeUnitLimit",
            ));
        }
        let price = &instructions[1];
        let compute_unit_price = match u64_at(&price.data, 1) {
            Some(price_value)
                if program(price) == COMPUTE_BUDGET_PROGRAM
                    && price.data.len() == 9
                    && price.data[0] == 3 =>
            {
                price_value
            }
            _ => {
                return Err(Refused::new(
                    reason::COMPUTE_PRICE,
                    "the second instruction is not SetComputeUnitPrice",
                ));
            }
        };
        if compute_unit_price > MAX_COMPUTE_UNIT_PRICE {
            return Err(Refused::new(
                reason::COMPUTE_PRICE_TOO_HIGH,
                format!(
                    "compute unit price {compute_unit_price} micro-lamports is above {MAX_COMPUTE_UNIT_PRICE}"
                ),
            ));
        }
        let transfer = &instructions[2];
        let token_program = program(transfer);
        let accounts: Option<Vec<(Pubkey, u8)>> = transfer
            .accounts
            .iter()
            .map(|index| message.account(*index).map(|key| (*key, *index)))
            .collect();
        let (amount, accounts) = match (u64_at(&transfer.data, 1), accounts) {
            (Some(amount), Some(accounts))
                if (token_program == TOKEN_PROGRAM || token_program == TOKEN_2022_PROGRAM)
                    && transfer.data.len() == 10
                    && transfer.data[0] == 12
                    && accounts.len() == 4 =>
            {
                (amount, accounts)
            }
            _ => {
                return Err(Refused::new(
                    reason::NO_TRANSFER,
                    "the third instruction is not an SPL Token or Token-2022 TransferChecked with 4 accounts",
                ));
            }
        };
        let mut memos = Vec::new();
        for (position, extra) in instructions[3..].iter().enumerate() {
            match program(extra) {
                key if key == MEMO_PROGRAM => memos.push(extra.data.clone()),
                key if key == LIGHTHOUSE_PROGRAM => {}
                key => {
                    return Err(Refused {
                        reason: reason::UNKNOWN_INSTRUCTION[position],
                        message: format!(
                            "instruction {} runs {key}, neither Memo nor Lighthouse",
                            position + 4
                        ),
                        payer: Some(accounts[3].0),
                    });
                }
            }
        }
        Ok(Self {
            fee_payer: message.fee_payer().copied().unwrap_or_default(),
            payer: accounts[3].0,
            source: accounts[0].0,
            mint: accounts[1].0,
            destination: accounts[2].0,
            amount,
            decimals: transfer.data[9],
            token_program,
            compute_unit_price,
            memos,
            payer_index: accounts[3].1,
        })
    }

    /// Holds the transfer of `transaction` (read by [`read`](Self::read)) to `expected`, in
    /// the official facilitator's order, then what the chain itself would refuse: the payer's
    /// signature, the decimals, a source that is not the payer's token account.
    ///
    /// # Errors
    ///
    /// The first check that fails, with its reason code and the payer.
    pub fn check(&self, transaction: &Transaction, expected: &Expected<'_>) -> Result<(), Refused> {
        let refuse = |reason, message: String| Refused {
            reason,
            message,
            payer: Some(self.payer),
        };
        if let Some(memo) = expected.memo {
            match self.memos.as_slice() {
                [only] if only == memo.as_bytes() => {}
                [_] => {
                    return Err(refuse(
                        reason::MEMO_MISMATCH,
                        "the Memo instruction is not extra.memo".to_owned(),
                    ));
                }
                memos => {
                    return Err(refuse(
                        reason::MEMO_COUNT,
                        format!(
                            "{} Memo instructions; extra.memo needs exactly one",
                            memos.len()
                        ),
                    ));
                }
            }
        }
        if self.fee_payer != expected.fee_payer {
            return Err(refuse(
                reason::FEE_PAYER_NOT_MANAGED,
                format!(
                    "the transaction's fee payer {} is not the facilitator's {}",
                    self.fee_payer, expected.fee_payer
                ),
            ));
        }
        let message = &transaction.message;
        let fee_payer_used = message.instructions.iter().any(|ix| {
            ix.accounts
                .iter()
                .any(|index| message.account(*index) == Some(&expected.fee_payer))
        });
        if fee_payer_used {
            return Err(refuse(
                reason::FEE_PAYER_TRANSFERRING,
                "the fee payer appears in an instruction's accounts".to_owned(),
            ));
        }
        if self.mint != expected.mint {
            return Err(refuse(
                reason::MINT_MISMATCH,
                format!("mint {} is not the asset {}", self.mint, expected.mint),
            ));
        }
        let destination =
            Pubkey::associated_token_address(&expected.pay_to, &expected.mint, &self.token_program);
        if self.destination != destination {
            return Err(refuse(
                reason::RECIPIENT_MISMATCH,
                format!(
                    "destination {} is not {destination}, the token account of payTo {}",
                    self.destination, expected.pay_to
                ),
            ));
        }
        if self.amount != expected.amount {
            return Err(refuse(
                reason::AMOUNT,
                format!(
                    "amount {} is not the required {}",
                    self.amount, expected.amount
                ),
            ));
        }
        if self.decimals != expected.decimals {
            return Err(refuse(
                reason::SIMULATION_FAILED,
                format!(
                    "TransferChecked states {} decimals; the mint has {}",
                    self.decimals, expected.decimals
                ),
            ));
        }
        let source =
            Pubkey::associated_token_address(&self.payer, &expected.mint, &self.token_program);
        if self.source != source {
            return Err(refuse(
                reason::SIMULATION_FAILED,
                format!(
                    "source {} is not {source}, the payer's token account",
                    self.source
                ),
            ));
        }
        if !message.is_signer(self.payer_index) {
            return Err(refuse(
                reason::SIMULATION_FAILED,
                format!("the payer {} is not a signer of the message", self.payer),
            ));
        }
        if expected.signatures {
            // Every signer but the fee payer (the facilitator signs last) must have signed.
            if let Some(index) = (1..message.required_signatures)
                .find(|index| !transaction.signature_verifies(*index))
            {
                let signer = message.account(index).copied().unwrap_or_default();
                return Err(refuse(
                    reason::SIMULATION_FAILED,
                    format!(
                        "the signature of {signer} is missing or does not verify over the message"
                    ),
                ));
            }
        }
        Ok(())
    }
}
