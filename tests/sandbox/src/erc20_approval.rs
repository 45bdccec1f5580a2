//! `erc20ApprovalGasSponsoring` in the sandbox: the buyer's signed ERC-20 `approve(Permit2,
//! amount)` transaction, decoded with alloy (EIP-2718), its signer recovered and its call read,
//! which the facilitator "broadcasts" (the ledger sets the allowance) before it settles; and the
//! wallet that signs one.

use alloy_consensus::{SignableTransaction as _, Transaction as _, TxEip1559, TxEnvelope};
use alloy_eips::eip2718::{Decodable2718 as _, Encodable2718 as _};
use alloy_primitives::{Address, Signature, TxKind, U256, hex};
use alloy_sol_types::SolCall as _;
use serde_json::json;
use tower_x402_evm::permit2;
use x402_wire::{ERC20_APPROVAL_GAS_SPONSORING, Erc20Approval, FacilitatorRequest, PaymentPayload};

use crate::eip712::parse_address;
use crate::reason;
use crate::verify::{Approval, Rejection};
use crate::{SandboxWallet, WalletError};

alloy_sol_types::sol! {
    /// ERC-20: lets `spender` move up to `amount` of the sender's tokens.
    function approve(address spender, uint256 amount) external returns (bool);
}

/// The approval a payment of `from`, paying `amount` of `token`, carries in
/// `erc20ApprovalGasSponsoring`, checked: `None` when it carries none.
pub(crate) fn check(
    request: &FacilitatorRequest,
    from: Address,
    token: Address,
    amount: u128,
) -> Result<Option<Approval>, Rejection> {
    let payload = request.payment_payload();
    let Some(info) = payload.sponsoring::<Erc20Approval>(ERC20_APPROVAL_GAS_SPONSORING) else {
        return Ok(None);
    };
    let format =
        |text: String| Rejection::new(reason::INVALID_ERC20_APPROVAL_EXTENSION_FORMAT, text);
    let info = info.map_err(|error| format(format!("info: {error}")))?;
    let bytes = info
        .signed_transaction
        .strip_prefix("0x")
        .and_then(|digits| hex::decode(digits).ok())
        .ok_or_else(|| format("signedTransaction is not 0x-prefixed hex".to_owned()))?;
    let envelope = TxEnvelope::decode_2718(&mut bytes.as_slice())
        .map_err(|error| format(format!("signedTransaction is not a transaction: {error}")))?;
    let signer = envelope
        .signature()
        .recover_address_from_prehash(&envelope.signature_hash())
        .map_err(|error| format(format!("signedTransaction's signature: {error}")))?;
    if signer != from || parse_address(&info.from) != Some(from) {
        let text = format!(
            "the approval is signed by {signer} (info.from {}), not the payer {from}",
            info.from
        );
        return Err(Rejection::new(reason::ERC20_APPROVAL_FROM_MISMATCH, text));
    }
    let chain_id = request.payment_requirements().network.evm_chain_id();
    if envelope.chain_id() != chain_id {
        let text = format!(
            "the approval is for chain {:?}, the payment on {chain_id:?}",
            envelope.chain_id()
        );
        return Err(format(text));
    }
    if envelope.to() != Some(token) || parse_address(&info.asset) != Some(token) {
        let text = format!(
            "the approval calls {:?}, not the token {token}",
            envelope.to()
        );
        return Err(Rejection::new(reason::ERC20_APPROVAL_ASSET_MISMATCH, text));
    }
    let call = approveCall::abi_decode(envelope.input()).map_err(|error| {
        format(format!(
            "the transaction is not approve(address,uint256): {error}"
        ))
    })?;
    if call.spender != permit2::PERMIT2 || parse_address(&info.spender) != Some(permit2::PERMIT2) {
        let text = format!("the approval is for {}, not Permit2", call.spender);
        return Err(Rejection::new(
            reason::ERC20_APPROVAL_SPENDER_NOT_PERMIT2,
            text,
        ));
    }
    if call.amount < U256::from(amount) {
        let text = format!(
            "the approval grants {}, below the amount {amount}",
            call.amount
        );
        return Err(format(text));
    }
    Ok(Some(Approval::Erc20 { value: call.amount }))
}

impl SandboxWallet {
    /// Adds to `payment` (a Permit2 payment) the `erc20ApprovalGasSponsoring` extension: this
    /// wallet's EIP-1559 transaction calling the accepted token's `approve(Permit2, uint256
    /// max)` with the account nonce `nonce`, signed and RLP-encoded. The facilitator broadcasts
    /// it (funding its gas) before it settles: a buyer with no allowance, whose token has no
    /// EIP-2612, pays in one request.
    ///
    /// # Errors
    ///
    /// When the accept is not on an EVM chain or its asset is not an address.
    pub fn sponsor_erc20_approval(
        &self,
        payment: &mut PaymentPayload,
        nonce: u64,
    ) -> Result<(), WalletError> {
        let accept = &payment.accepted;
        let unsignable = |what: String| WalletError::Unsignable(what);
        let chain_id = accept.network.evm_chain_id().ok_or_else(|| {
            unsignable(format!("network `{}` is not an EVM chain", accept.network))
        })?;
        let token = parse_address(&accept.asset)
            .ok_or_else(|| unsignable(format!("asset `{}` is not an address", accept.asset)))?;
        let call = approveCall {
            spender: permit2::PERMIT2,
            amount: U256::MAX,
        };
        let transaction = TxEip1559 {
            chain_id,
            nonce,
            gas_limit: 60_000,
            max_fee_per_gas: 1_000_000_000,
            max_priority_fee_per_gas: 1_000_000,
            to: TxKind::Call(token),
            value: U256::ZERO,
            access_list: Default::default(),
            input: call.abi_encode().into(),
        };
        let signature = self.sign_prehash(transaction.signature_hash())?;
        let signature = signature
            .strip_prefix("0x")
            .and_then(|digits| hex::decode(digits).ok())
            .and_then(|bytes| Signature::from_raw(&bytes).ok())
            .ok_or_else(|| WalletError::Signing("the signature does not read back".to_owned()))?;
        let envelope = TxEnvelope::from(transaction.into_signed(signature));
        let info = Erc20Approval {
            from: self.address(),
            asset: token.to_checksum(None),
            spender: permit2::PERMIT2.to_checksum(None),
            amount: U256::MAX.to_string(),
            signed_transaction: hex::encode_prefixed(envelope.encoded_2718()),
            version: "1".to_owned(),
        };
        let info = serde_json::to_value(info).map_err(|e| WalletError::Signing(e.to_string()))?;
        payment
            .extensions
            .get_or_insert_with(Default::default)
            .insert(
                ERC20_APPROVAL_GAS_SPONSORING.to_owned(),
                json!({ "info": info }),
            );
        Ok(())
    }
}
