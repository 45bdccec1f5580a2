//! The sandbox's Solana ledger as a Solana JSON-RPC endpoint (`POST /rpc/solana`): what a buyer's
//! client asks to build a payment and what a reconciler asks to find one.

use axum::Json;
use axum::extract::State;
use base64::Engine as _;
use serde_json::{Value, json};
use tower_x402_solana::{Pubkey, TOKEN_PROGRAM};

use crate::SandboxFacilitator;
use crate::solana::{DEPLOYMENTS, SolanaSettlement};

/// The lamports of an SPL mint account (its rent-exempt minimum).
const MINT_LAMPORTS: u64 = 1_461_600;
/// The lamports of an SPL token account (its rent-exempt minimum).
const TOKEN_ACCOUNT_LAMPORTS: u64 = 2_039_280;
/// What every wallet holds in SOL, in lamports.
const WALLET_LAMPORTS: u64 = 1_000_000_000;
/// Fee of one signature, in lamports.
const SIGNATURE_FEE: u64 = 5_000;

type Answer = Result<Value, (i64, String)>;

pub(crate) async fn rpc(
    State(facilitator): State<SandboxFacilitator>,
    Json(request): Json<Value>,
) -> Json<Value> {
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let method = request["method"].as_str().unwrap_or_default();
    let params = &request["params"];
    let answer = facilitator.solana_call(method, params);
    Json(match answer {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    })
}

fn address(params: &Value, at: usize) -> Result<Pubkey, (i64, String)> {
    let text = params[at].as_str().unwrap_or_default();
    text.parse().map_err(|_| {
        (
            -32602,
            format!("Invalid param: `{text}` is not a base58 address"),
        )
    })
}

fn base64(bytes: &[u8]) -> Value {
    json!([
        base64::engine::general_purpose::STANDARD.encode(bytes),
        "base64"
    ])
}

impl SandboxFacilitator {
    /// Answers the Solana JSON-RPC call `method(params)` from the Solana ledger.
    fn solana_call(&self, method: &str, params: &Value) -> Answer {
        let ledger = &self.inner.solana.ledger;
        let context = |value: Value| json!({"context": {"slot": ledger.slot(), "apiVersion": "2.2.0"}, "value": value});
        match method {
            "getLatestBlockhash" => {
                let (blockhash, slot) = ledger.new_blockhash(self.now());
                Ok(json!({
                    "context": {"slot": slot, "apiVersion": "2.2.0"},
                    "value": {
                        "blockhash": bs58::encode(blockhash).into_string(),
                        "lastValidBlockHeight": slot + 150,
                    },
                }))
            }
            "isBlockhashValid" => {
                let mut blockhash = [0u8; 32];
                let text = params[0].as_str().unwrap_or_default();
                match bs58::decode(text).onto(&mut blockhash) {
                    Ok(32) => Ok(context(json!(
                        ledger.blockhash_valid(&blockhash, self.now())
                    ))),
                    _ => Err((
                        -32602,
                        format!("Invalid param: `{text}` is not a blockhash"),
                    )),
                }
            }
            "getAccountInfo" => Ok(context(self.account_info(&address(params, 0)?))),
            "getBalance" => {
                address(params, 0)?;
                Ok(context(json!(WALLET_LAMPORTS)))
            }
            "getTokenAccountBalance" => {
                let account = address(params, 0)?;
                let balance = ledger.balance(&account, self.inner.ledger.starting_balance());
                Ok(context(json!({
                    "amount": balance.to_string(),
                    "decimals": 6,
                    "uiAmount": balance as f64 / 1e6,
                    "uiAmountString": x402_wire::UsdAmount::from_atomic(x402_wire::AtomicAmount(balance), 6)
                        .map(|amount| amount.to_string()).unwrap_or_default(),
                })))
            }
            "getSlot" | "getBlockHeight" => Ok(json!(ledger.slot())),
            "getHealth" => Ok(json!("ok")),
            "getMinimumBalanceForRentExemption" => Ok(json!(TOKEN_ACCOUNT_LAMPORTS)),
            "getFeeForMessage" => Ok(context(json!(SIGNATURE_FEE * 2))),
            "getSignatureStatuses" => {
                let statuses: Vec<Value> = params[0]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .map(|signature| match self.landed(signature.as_str()) {
                        Some(settlement) => json!({
                            "slot": settlement.slot,
                            "confirmations": null,
                            "err": null,
                            "status": {"Ok": null},
                            "confirmationStatus": "finalized",
                        }),
                        None => Value::Null,
                    })
                    .collect();
                Ok(context(Value::Array(statuses)))
            }
            "getSignaturesForAddress" => {
                let account = address(params, 0)?;
                let limit = params[1]["limit"].as_u64().unwrap_or(1_000) as usize;
                let found: Vec<Value> = self
                    .solana_settlements()
                    .iter()
                    .rev()
                    .filter(|settlement| settlement.accounts.contains(&account))
                    .take(limit)
                    .map(|settlement| {
                        json!({
                            "signature": settlement.transaction,
                            "slot": settlement.slot,
                            "err": null,
                            "memo": null,
                            "blockTime": null,
                            "confirmationStatus": "finalized",
                        })
                    })
                    .collect();
                Ok(Value::Array(found))
            }
            "getTransaction" => Ok(match self.landed(params[0].as_str()) {
                Some(settlement) => json!({
                    "slot": settlement.slot,
                    "blockTime": null,
                    "version": 0,
                    "transaction": [settlement.wire, "base64"],
                    "meta": {
                        "err": null,
                        "status": {"Ok": null},
                        "fee": SIGNATURE_FEE * 2,
                        "preBalances": [],
                        "postBalances": [],
                        "logMessages": [],
                    },
                }),
                None => Value::Null,
            }),
            _ => Err((-32601, format!("Method not found: {method} is not served"))),
        }
    }

    fn landed(&self, signature: Option<&str>) -> Option<SolanaSettlement> {
        let signature = signature?;
        self.solana_settlements()
            .into_iter()
            .find(|settlement| settlement.transaction == signature)
    }

    /// A mint, a token account, a wallet, or nothing.
    fn account_info(&self, account: &Pubkey) -> Value {
        let solana = &self.inner.solana;
        let mint = DEPLOYMENTS
            .iter()
            .find(|usdc| usdc.asset.parse::<Pubkey>().ok().as_ref() == Some(account));
        if let Some(usdc) = mint {
            // SPL Mint: authority option, authority, supply, decimals, initialized, freeze option
            // and freeze authority.
            let mut data = Vec::with_capacity(82);
            data.extend(1u32.to_le_bytes());
            data.extend(solana.fee_payer().0);
            data.extend(u64::MAX.to_le_bytes());
            data.push(usdc.decimals);
            data.push(1);
            data.extend(0u32.to_le_bytes());
            data.extend([0u8; 32]);
            return account_value(&data, MINT_LAMPORTS, &TOKEN_PROGRAM);
        }
        if let Some(token) = solana.ledger.token_account(account) {
            let balance = solana
                .ledger
                .balance(account, self.inner.ledger.starting_balance());
            let amount = u64::try_from(balance).unwrap_or(u64::MAX);
            // SPL Account: mint, owner, amount, delegate option and delegate, state,
            // is-native option and amount, delegated amount, close authority option and key.
            let mut data = Vec::with_capacity(165);
            data.extend(token.mint.0);
            data.extend(token.owner.0);
            data.extend(amount.to_le_bytes());
            data.extend(0u32.to_le_bytes());
            data.extend([0u8; 32]);
            data.push(1);
            data.extend(0u32.to_le_bytes());
            data.extend(0u64.to_le_bytes());
            data.extend(0u64.to_le_bytes());
            data.extend(0u32.to_le_bytes());
            data.extend([0u8; 32]);
            return account_value(&data, TOKEN_ACCOUNT_LAMPORTS, &TOKEN_PROGRAM);
        }
        Value::Null
    }
}

fn account_value(data: &[u8], lamports: u64, owner: &Pubkey) -> Value {
    json!({
        "data": base64(data),
        "executable": false,
        "lamports": lamports,
        "owner": owner.to_string(),
        "rentEpoch": u64::MAX,
        "space": data.len(),
    })
}
