//! The example store as a library: every module of the `store` binary, so the tests (and
//! anything else that needs a store in-process) can build the state with
//! [`state::build_state`] and the app with [`app::app`].
//!
//! | module | concern |
//! |---|---|
//! | [`app`] | the router: every path is mounted there |
//! | [`state`] | the state the handlers share, and how it is built at start-up |
//! | [`config`] | settings: flags and `STORE_…` environment variables |
//! | [`catalog`] | the 45 products and their offers |
//! | [`paywall`] | the paid route `GET /api/x402/{sku}` and the payment doors |
//! | [`sales`] | what a payment buys: purchase, Passports, fulfillment, referrals, the funnel |
//! | [`documents`] | the free catalog documents: `/.well-known`, OpenAPI, `llms.txt`, the bazaar |
//! | [`discovery`] | the channels the store can be found through, probed and announced to |
//! | [`mcp`] | the read-only MCP discovery server |
//! | [`storage`] | the database |
//! | [`ops`] | the operator's address: `/metrics`, `/healthz`, `/readyz` |
//! | [`serve`] | serving on TCP with header, request and connection limits |
//! | [`http_errors`] | the store's JSON error answers, including those the router and middleware write |
//! | [`request_log`] | the request log, with secrets redacted from every URI |

pub mod app;
pub mod catalog;
pub mod config;
pub mod discovery;
pub mod documents;
pub mod http_errors;
pub mod mcp;
pub mod ops;
pub mod paywall;
pub mod request_log;
pub mod sales;
pub mod serve;
pub mod state;
pub mod storage;
