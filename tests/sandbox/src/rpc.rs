//! The sandbox ledger seen as a chain: a minimal Ethereum JSON-RPC endpoint for reconcilers.

use alloy_primitives::{B256, U256, keccak256};
use alloy_sol_types::{SolCall, SolEvent};
use axum::Json;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};
use tower_x402_evm::eip3009::{AuthorizationUsed, Transfer, authorizationStateCall};
use tower_x402_evm::permit2::{self, nonce_position, nonceBitmapCall};
use x402_wire::{Network, PERMIT2_TRANSFER_METHOD, UPTO_SCHEME};

use crate::SandboxFacilitator;
use crate::eip712::parse_address;
use crate::ledger::SandboxSettlement;

mod payer;
mod token;

alloy_sol_types::sol! {
    /// EIP-1271: whether `signature` is valid for `hash`, asked of a smart-contract wallet.
    function isValidSignature(bytes32 hash, bytes signature) external view returns (bytes4);
}

#[derive(Clone)]
struct Chain {
    sandbox: SandboxFacilitator,
    network: Network,
    chain_id: u64,
}

impl SandboxFacilitator {
    /// This facilitator's ledger as the chain `network` (an `eip155` network) over Ethereum
    /// JSON-RPC at `POST /`: each settlement is one block holding one successful
    /// `transferWithAuthorization` transaction whose receipt carries the token's `Transfer` and
    /// `AuthorizationUsed` logs (an `upto` settlement: one transaction to the `upto` proxy whose
    /// receipt carries the token's `Transfer(payer, payTo, amount)`). Answers `eth_chainId`,
    /// `eth_blockNumber`, `eth_getLogs` (address, topics and block range),
    /// `eth_getTransactionReceipt`, `eth_getCode` (a contract: a wallet deployed with
    /// [`deploy_contract_wallet`](Self::deploy_contract_wallet), Permit2, the x402 proxies, the
    /// batch contract, USDC), and `eth_call` of the token's `authorizationState` (a
    /// nonce spent by a settlement or by a payment channel's deposit), of
    /// Permit2's `nonceBitmap`, and of the `x402BatchSettlement` views `channels`,
    /// `pendingWithdrawals`, `refundNonce` and `receivers`; and, for trying a server against a
    /// payer who withdraws, `sandbox_initiateWithdraw`, `sandbox_finalizeWithdraw` and
    /// `evm_increaseTime` (the sandbox's clock moved forward); other methods get JSON-RPC error
    /// -32601.
    ///
    /// ```no_run
    /// use x402_wire::Network;
    /// use tower_x402_sandbox::SandboxFacilitator;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8545").await?;
    /// axum::serve(listener, SandboxFacilitator::new().rpc_router(Network::BASE)).await
    /// # }
    /// ```
    pub fn rpc_router(&self, network: Network) -> axum::Router {
        let chain_id = network.evm_chain_id().unwrap_or_default();
        axum::Router::new().route("/", post(rpc)).with_state(Chain {
            sandbox: self.clone(),
            network,
            chain_id,
        })
    }
}

async fn rpc(State(chain): State<Chain>, Json(request): Json<Value>) -> Json<Value> {
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let method = request["method"].as_str().unwrap_or_default();
    let params = &request["params"];
    let result = match method {
        "eth_chainId" => Ok(json!(format!("0x{:x}", chain.chain_id))),
        "eth_blockNumber" => Ok(json!(format!("0x{:x}", chain.blocks().len() + 1))),
        "eth_getLogs" => Ok(chain.logs(&params[0])),
        "eth_getTransactionReceipt" => Ok(chain.receipt(params[0].as_str().unwrap_or_default())),
        "eth_call" => chain.call(&params[0]),
        "eth_getCode" => Ok(chain.code(params[0].as_str().unwrap_or_default())),
        _ => chain
            .payer_call(method, params)
            .unwrap_or_else(|| Err((-32601, format!("method {method} is not served")))),
    };
    Json(match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    })
}

impl Chain {
    /// `eth_getCode`: a stand-in byte for a contract (the sandbox runs no bytecode), `0x` for
    /// a key's account.
    fn code(&self, address: &str) -> Value {
        let contract = parse_address(address).is_some_and(|a| self.sandbox.is_contract(a));
        json!(if contract { "0xfe" } else { "0x" })
    }

    /// Settlements on this network, as (block number, settlement).
    fn blocks(&self) -> Vec<(u64, SandboxSettlement)> {
        (1..)
            .zip(self.sandbox.settlements())
            .filter(|(_, settlement)| settlement.network == self.network)
            .collect()
    }

    fn logs(&self, filter: &Value) -> Value {
        let number = |key: &str, default: u64| {
            filter[key]
                .as_str()
                .and_then(|hex| u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok())
                .unwrap_or(default)
        };
        let (from, to) = (number("fromBlock", 0), number("toBlock", u64::MAX));
        let address = filter["address"].as_str().and_then(parse_address);
        let wanted: Vec<Option<Vec<String>>> = match &filter["topics"] {
            Value::Array(topics) => topics.iter().map(topic_choices).collect(),
            _ => Vec::new(),
        };
        let logs: Vec<Value> = self
            .blocks()
            .into_iter()
            .filter(|(block, _)| (from..=to).contains(block))
            .flat_map(|(block, settlement)| logs_of(block, &settlement))
            .filter(|log| {
                address.is_none_or(|address| {
                    log["address"].as_str().and_then(parse_address) == Some(address)
                })
            })
            .filter(|log| {
                wanted
                    .iter()
                    .enumerate()
                    .all(|(index, choices)| match choices {
                        None => true,
                        Some(choices) => log["topics"][index].as_str().is_some_and(|topic| {
                            choices.iter().any(|c| c.eq_ignore_ascii_case(topic))
                        }),
                    })
            })
            .collect();
        Value::Array(logs)
    }

    fn receipt(&self, hash: &str) -> Value {
        let Some((block, settlement)) = self
            .blocks()
            .into_iter()
            .find(|(_, settlement)| settlement.transaction.eq_ignore_ascii_case(hash))
        else {
            return Value::Null;
        };
        let to = if settlement.scheme == UPTO_SCHEME {
            permit2::UPTO_PROXY.to_checksum(None)
        } else if settlement.transfer_method == PERMIT2_TRANSFER_METHOD {
            permit2::EXACT_PROXY.to_checksum(None)
        } else {
            settlement.asset.clone()
        };
        json!({
            "type": "0x2",
            "status": "0x1",
            "cumulativeGasUsed": "0x186a0",
            "gasUsed": "0x186a0",
            "effectiveGasPrice": "0x1",
            "logsBloom": format!("0x{}", "0".repeat(512)),
            "logs": logs_of(block, &settlement),
            "transactionHash": settlement.transaction,
            "transactionIndex": "0x0",
            "blockHash": block_hash(block),
            "blockNumber": format!("0x{block:x}"),
            "from": self.sandbox.signer_address(),
            "to": to,
            "contractAddress": null,
        })
    }

    fn call(&self, call: &Value) -> Result<Value, (i64, String)> {
        let input = call["input"]
            .as_str()
            .or_else(|| call["data"].as_str())
            .unwrap_or_default();
        let bytes = alloy_primitives::hex::decode(input).map_err(|e| (-32602, e.to_string()))?;
        let to = call["to"].as_str().and_then(parse_address);
        let owner = to.and_then(|to| {
            self.sandbox
                .inner
                .contract_wallets
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&to)
                .copied()
        });
        if let Some(owner) = owner {
            let Ok(isValidSignatureCall { hash, signature }) =
                isValidSignatureCall::abi_decode(&bytes)
            else {
                return Err((-32000, "execution reverted: not isValidSignature".into()));
            };
            let answer = crate::siwx::contract_wallet_answer(owner, &hash.0, &signature);
            return Ok(json!(alloy_primitives::hex::encode_prefixed(answer)));
        }
        if to == Some(permit2::PERMIT2) {
            return self.nonce_bitmap(&bytes);
        }
        if crate::batch::is_contract(to) {
            let answer = self
                .sandbox
                .batch_call(&self.network, &bytes)
                .map_err(|message| (-32000, message))?;
            return Ok(json!(alloy_primitives::hex::encode_prefixed(answer)));
        }
        if let Some(answer) = self.token_view(to, &bytes) {
            return Ok(json!(alloy_primitives::hex::encode_prefixed(answer)));
        }
        let Ok(authorizationStateCall { authorizer, nonce }) =
            authorizationStateCall::abi_decode(&bytes)
        else {
            return Err((
                -32000,
                "execution reverted: only authorizationState is served".into(),
            ));
        };
        let token = call["to"].as_str().and_then(parse_address);
        let used = self.blocks().iter().any(|(_, settlement)| {
            settlement.transfer_method == "eip3009"
                && token.is_some_and(|token| parse_address(&settlement.asset) == Some(token))
                && parse_address(&settlement.from) == Some(authorizer)
                && settlement.nonce.parse::<B256>().ok() == Some(nonce)
        }) || token.is_some_and(|token| {
            // A nonce spent otherwise: a payment channel's deposit.
            self.sandbox
                .inner
                .ledger
                .nonce_used(&self.network, token, authorizer, nonce)
        });
        let answer = authorizationStateCall::abi_encode_returns(&used);
        Ok(json!(alloy_primitives::hex::encode_prefixed(answer)))
    }
}

impl Chain {
    /// Permit2's `nonceBitmap(owner, wordPos)`: bit `n` set when nonce `wordPos << 8 | n` of
    /// `owner` was consumed by an `upto` settlement on this chain.
    fn nonce_bitmap(&self, input: &[u8]) -> Result<Value, (i64, String)> {
        let Ok(nonceBitmapCall { owner, wordPos }) = nonceBitmapCall::abi_decode(input) else {
            return Err((
                -32000,
                "execution reverted: only nonceBitmap is served on Permit2".into(),
            ));
        };
        let word = self
            .blocks()
            .iter()
            .filter(|(_, settlement)| {
                settlement.transfer_method == PERMIT2_TRANSFER_METHOD
                    && parse_address(&settlement.from) == Some(owner)
            })
            .filter_map(|(_, settlement)| settlement.nonce.parse::<B256>().ok())
            .map(|nonce| nonce_position(U256::from_be_bytes(nonce.0)))
            .filter(|(word, _)| *word == wordPos)
            .fold(U256::ZERO, |bits, (_, bit)| bits | (U256::from(1) << bit));
        let answer = nonceBitmapCall::abi_encode_returns(&word);
        Ok(json!(alloy_primitives::hex::encode_prefixed(answer)))
    }
}

/// `null` (any), one topic, or a list of alternatives.
fn topic_choices(topic: &Value) -> Option<Vec<String>> {
    match topic {
        Value::String(one) => Some(vec![one.clone()]),
        Value::Array(many) => Some(
            many.iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect(),
        ),
        _ => None,
    }
}

/// The `Transfer` and `AuthorizationUsed` logs of a settlement's transaction.
fn logs_of(block: u64, settlement: &SandboxSettlement) -> Vec<Value> {
    let address = |text: &str| parse_address(text).unwrap_or_default();
    let log = |index: u64, topics: Vec<String>, data: String| {
        json!({
            "address": settlement.asset,
            "topics": topics,
            "data": data,
            "blockHash": block_hash(block),
            "blockNumber": format!("0x{block:x}"),
            "transactionHash": settlement.transaction,
            "transactionIndex": "0x0",
            "logIndex": format!("0x{index:x}"),
            "removed": false,
        })
    };
    let transfer = Transfer {
        from: address(&settlement.from),
        to: address(&settlement.to),
        value: U256::from(settlement.amount.get()),
    };
    let used = AuthorizationUsed {
        authorizer: address(&settlement.from),
        nonce: settlement.nonce.parse::<B256>().unwrap_or_default(),
    };
    let mut logs = vec![(0, transfer.encode_log_data())];
    // Permit2 marks its nonce in storage; only EIP-3009 emits an event for it.
    if settlement.transfer_method != PERMIT2_TRANSFER_METHOD {
        logs.push((1, used.encode_log_data()));
    }
    logs.into_iter()
        .map(|(index, data)| {
            let topics = data.topics().iter().map(B256::to_string).collect();
            log(
                index,
                topics,
                alloy_primitives::hex::encode_prefixed(&data.data),
            )
        })
        .collect()
}

fn block_hash(block: u64) -> String {
    keccak256(block.to_be_bytes()).to_string()
}
