//! The sandbox ledger seen as a chain: a minimal Ethereum JSON-RPC endpoint for reconcilers.

use alloy_primitives::{Address, B256, U256, keccak256};
use axum::Json;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};

use super::SandboxFacilitator;
use super::eip712::parse_address;
use super::ledger::SandboxSettlement;
use crate::proto::Network;

/// `authorizationState(address,bytes32)`.
const AUTHORIZATION_STATE: [u8; 4] = [0xe9, 0x4a, 0x01, 0x02];

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
    /// `AuthorizationUsed` logs. Answers `eth_chainId`, `eth_blockNumber`, `eth_getLogs`
    /// (address, topics and block range), `eth_getTransactionReceipt` and `eth_call` of
    /// `authorizationState`; other methods get JSON-RPC error -32601.
    ///
    /// ```no_run
    /// use tower_x402::proto::Network;
    /// use tower_x402::sandbox::SandboxFacilitator;
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
        _ => Err((-32601, format!("method {method} is not served"))),
    };
    Json(match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    })
}

impl Chain {
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
            "to": settlement.asset,
            "contractAddress": null,
        })
    }

    fn call(&self, call: &Value) -> Result<Value, (i64, String)> {
        let input = call["input"]
            .as_str()
            .or_else(|| call["data"].as_str())
            .unwrap_or_default();
        let bytes = alloy_primitives::hex::decode(input).map_err(|e| (-32602, e.to_string()))?;
        if bytes.len() != 68 || bytes[..4] != AUTHORIZATION_STATE {
            return Err((
                -32000,
                "execution reverted: only authorizationState is served".into(),
            ));
        }
        let token = call["to"].as_str().and_then(parse_address);
        let authorizer = Address::from_slice(&bytes[16..36]);
        let nonce = B256::from_slice(&bytes[36..68]);
        let used = self.blocks().iter().any(|(_, settlement)| {
            token.is_some_and(|token| parse_address(&settlement.asset) == Some(token))
                && parse_address(&settlement.from) == Some(authorizer)
                && settlement.nonce.parse::<B256>().ok() == Some(nonce)
        });
        Ok(json!(B256::from(U256::from(u8::from(used))).to_string()))
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
    let word = |address: &str| {
        parse_address(address)
            .map(|a| a.into_word().to_string())
            .unwrap_or_default()
    };
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
    vec![
        log(
            0,
            vec![
                keccak256("Transfer(address,address,uint256)").to_string(),
                word(&settlement.from),
                word(&settlement.to),
            ],
            B256::from(U256::from(settlement.amount.get())).to_string(),
        ),
        log(
            1,
            vec![
                keccak256("AuthorizationUsed(address,bytes32)").to_string(),
                word(&settlement.from),
                settlement.nonce.clone(),
            ],
            "0x".to_owned(),
        ),
    ]
}

fn block_hash(block: u64) -> String {
    keccak256(block.to_be_bytes()).to_string()
}
