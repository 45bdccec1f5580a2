//! The discovery channels: where the store can be found, how, and the built-in list.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What kind of index a channel is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelKind {
    /// The store's own catalog.
    FirstParty,
    /// A facilitator's bazaar listing (`/discovery/resources`).
    FacilitatorIndex,
    /// A crawler that reads the store's documents.
    Crawler,
    /// A list kept by people.
    Curated,
    /// A directory of MCP servers.
    McpDirectory,
    /// In-page tools for browser agents.
    Webmcp,
    /// Something the store deliberately does not do.
    DoNot,
}

/// Whether a channel lists the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelStatus {
    /// The store is listed (or, first-party, served).
    Live,
    /// Reachable, but the store is not in it.
    NotIndexed,
    /// Listing needs a submission.
    Submit,
    /// The probe could not reach it.
    Down,
    /// Does not apply.
    #[serde(rename = "n_a")]
    NA,
}

/// How a probe reads a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeKind {
    /// A facilitator's `GET /discovery/resources` (x402 v2 §8): pages of `items[].resource`.
    FacilitatorResources,
    /// A page that names the store's host when it lists the store.
    ContainsOrigin,
}

/// A probe: where to look and how to read the answer. `{origin}` in the URL becomes the
/// percent-encoded origin.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// What to GET.
    pub url: String,
    /// How to read it.
    pub kind: ProbeKind,
}

/// An announcement: a JSON POST to `url` whose body is `body` with every string `{origin}`
/// replaced by the store's origin.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Announce {
    /// Where to POST.
    pub url: String,
    /// The body template.
    pub body: Value,
}

/// One channel, with the fields of the specification plus how to probe and announce.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChannelSpec {
    /// Stable identifier.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Kind of index.
    pub kind: ChannelKind,
    /// Where the channel lives.
    pub url: String,
    /// How the store gets listed there.
    pub how: String,
    /// Anything else worth knowing.
    #[serde(default)]
    pub notes: String,
    /// The status when not probed.
    pub status: ChannelStatus,
    /// How to check whether the store is listed, if that can be checked.
    #[serde(default)]
    pub probe: Option<Probe>,
    /// How to submit the store's origin, if the channel accepts a URL.
    #[serde(default)]
    pub announce: Option<Announce>,
}

impl ChannelSpec {
    /// Checks the identifiers and that every URL is absolute http(s).
    ///
    /// # Errors
    ///
    /// A sentence naming the channel and what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.id.is_empty()
            || !self
                .id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "channel id `{}` must be letters, digits, `-` or `_`",
                self.id
            ));
        }
        let check = |what: &str, url: &str| {
            let filled = url.replace("{origin}", "origin");
            match reqwest::Url::parse(&filled) {
                Ok(parsed)
                    if matches!(parsed.scheme(), "http" | "https")
                        && parsed.host_str().is_some() =>
                {
                    Ok(())
                }
                _ => Err(format!(
                    "channel `{}`: {what} `{url}` is not an absolute http(s) URL",
                    self.id
                )),
            }
        };
        check("url", &self.url)?;
        if let Some(probe) = &self.probe {
            check("probe url", &probe.url)?;
        }
        if let Some(announce) = &self.announce {
            check("announce url", &announce.url)?;
        }
        Ok(())
    }

    /// Whether a `live` status means a third party lists the store (what `indexed` counts).
    pub fn is_third_party_index(&self) -> bool {
        !matches!(self.kind, ChannelKind::FirstParty | ChannelKind::DoNot)
    }
}

/// The built-in channels for a store at `base_url`.
pub fn defaults(base_url: &str) -> Vec<ChannelSpec> {
    let facilitator = |id: &str, name: &str, url: &str| {
        ChannelSpec {
        id: id.to_owned(),
        name: name.to_owned(),
        kind: ChannelKind::FacilitatorIndex,
        url: url.to_owned(),
        how: "Cataloged by the facilitator when a buyer settles through it and echoes the 402's extensions.bazaar, which every product carries.".to_owned(),
        notes: "Lists only resources settled through that facilitator.".to_owned(),
        status: ChannelStatus::NotIndexed,
        probe: Some(Probe {
            url: url.to_owned(),
            kind: ProbeKind::FacilitatorResources,
        }),
        announce: None,
    }
    };
    vec![
        ChannelSpec {
            id: "store-bazaar".to_owned(),
            name: "This store's own catalog".to_owned(),
            kind: ChannelKind::FirstParty,
            url: format!("{base_url}/api/bazaar"),
            how: "Served here: /api/bazaar, /bazaar, /.well-known/x402.json, /openapi.json, /llms.txt and /mcp.".to_owned(),
            notes: "First-party; not a third-party index and not counted as indexed.".to_owned(),
            status: ChannelStatus::Live,
            probe: None,
            announce: None,
        },
        facilitator("cdp-bazaar", "Coinbase CDP bazaar", "https://api.cdp.coinbase.com/platform/v2/x402/discovery/resources"),
        facilitator("payai-bazaar", "PayAI bazaar", "https://facilitator.payai.network/discovery/resources"),
        ChannelSpec {
            id: "x402scan".to_owned(),
            name: "x402scan".to_owned(),
            kind: ChannelKind::Crawler,
            url: "https://www.x402scan.com".to_owned(),
            how: "Reads /openapi.json and probes each product path for its 402; POST /api/discovery submits the origin.".to_owned(),
            notes: "Registers Base and Solana accepts over HTTPS only.".to_owned(),
            status: ChannelStatus::Submit,
            probe: None,
            announce: Some(Announce {
                url: "https://www.x402scan.com/api/trpc/public.resources.registerFromOrigin".to_owned(),
                body: json!({"json": {"origin": "{origin}"}}),
            }),
        },
        ChannelSpec {
            id: "x402-ecosystem".to_owned(),
            name: "x402 ecosystem page".to_owned(),
            kind: ChannelKind::Curated,
            url: "https://www.x402.org/ecosystem".to_owned(),
            how: "Listed by a pull request to the x402 project; the probe looks for the store's host on the page.".to_owned(),
            notes: String::new(),
            status: ChannelStatus::Submit,
            probe: Some(Probe {
                url: "https://www.x402.org/ecosystem".to_owned(),
                kind: ProbeKind::ContainsOrigin,
            }),
            announce: None,
        },
        ChannelSpec {
            id: "mcp-registry".to_owned(),
            name: "MCP Registry".to_owned(),
            kind: ChannelKind::McpDirectory,
            url: "https://registry.modelcontextprotocol.io".to_owned(),
            how: "Publish a server.json naming the /mcp endpoint with the registry's publisher tool (namespace proof required).".to_owned(),
            notes: "The discovery server is a read-only catalog, not a buyer runtime.".to_owned(),
            status: ChannelStatus::Submit,
            probe: None,
            announce: None,
        },
        ChannelSpec {
            id: "webmcp".to_owned(),
            name: "WebMCP".to_owned(),
            kind: ChannelKind::Webmcp,
            url: format!("{base_url}/bazaar"),
            how: "The /bazaar page registers no in-page tools; agents use /mcp.".to_owned(),
            notes: String::new(),
            status: ChannelStatus::NA,
            probe: None,
            announce: None,
        },
        ChannelSpec {
            id: "agent-card".to_owned(),
            name: "Agent card / agent registries".to_owned(),
            kind: ChannelKind::DoNot,
            url: format!("{base_url}/.well-known/did.json"),
            how: "Not done: no agent card is hosted (did.json answers 404) and the store joins no agent registry.".to_owned(),
            notes: String::new(),
            status: ChannelStatus::NA,
            probe: None,
            announce: None,
        },
    ]
}
