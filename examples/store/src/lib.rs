//! The example store as a library: every module of the `store` binary, so the tests (and
//! anything else that needs a store in-process) can build the app with [`app::app`].

pub mod app;
pub mod bazaar;
pub mod bazaar_page;
pub mod catalog;
pub mod config;
pub mod discovery;
pub mod doctrine;
pub mod doors;
pub mod fulfillment;
pub mod llms;
pub mod mcp;
pub mod openapi;
pub mod paid_route;
pub mod passport;
pub mod purchase;
pub mod referral;
pub mod standing;
pub mod storage;
pub mod well_known;
