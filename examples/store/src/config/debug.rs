//! How a [`Config`] shows itself in the logs: every setting, secrets redacted.

use std::fmt;

use super::Config;
use crate::storage::without_password;

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("base_url", &self.base_url)
            .field("slug_prefix", &self.slug_prefix)
            .field("pay_to", &self.pay_to)
            .field("facilitator_url", &self.facilitator_url)
            .field(
                "facilitator_bearer",
                &self.facilitator_bearer.as_ref().map(|_| "<redacted>"),
            )
            .field("database_url", &without_password(&self.database_url))
            .field("database_timeout", &self.database_timeout)
            .field("second_pay_to", &self.second_pay_to)
            .field("third_pay_to", &self.third_pay_to)
            .field("checkout_url", &self.checkout_url)
            .field("content_dir", &self.content_dir)
            .field(
                "discovery_channels",
                &self.discovery_channels.as_ref().map(Vec::len),
            )
            // An RPC URL often carries the provider's API key.
            .field("rpc_url", &self.rpc_url.as_ref().map(|_| "<redacted>"))
            .field(
                "solana_rpc_url",
                &self.solana_rpc_url.as_ref().map(|_| "<redacted>"),
            )
            .field("settlement_lease", &self.settlement_lease)
            .field("verify_before_settling", &self.verify_before_settling)
            .field("limits", &self.limits)
            .field("fulfillment_secret", &"<redacted>")
            .field("redelivery_window", &self.redelivery_window)
            .field("siwx_entitlement", &self.siwx_entitlement)
            .field("metrics_listen", &self.metrics_listen)
            .field("permit2", &self.permit2)
            .field("shutdown_grace", &self.shutdown_grace)
            .finish()
    }
}
