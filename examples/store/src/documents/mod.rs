//! The free catalog documents: HTTP 200 resources for agents, crawlers and people, never
//! paywalls. Each one served counts in the funnel's `retrieved` stage; each carries an `ETag`
//! and a cache lifetime ([`caching`]).

pub mod bazaar;
pub mod bazaar_page;
pub mod caching;
pub mod doctrine;
pub mod llms_txt;
pub mod openapi;
pub mod prebuilt;
pub mod well_known;
