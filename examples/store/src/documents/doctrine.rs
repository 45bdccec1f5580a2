//! What the store says about itself, and what it never says. Served by the MCP `get_doctrine`
//! tool, `/llms.txt` and `/bazaar`.
//!
//! Who settles depends on the mode, so the doctrine does too: [`statements`] with `demo` set
//! names the in-process sandbox, without it the external facilitator.

/// The doctrine of a store with an external facilitator (live mode), one statement per entry,
/// in the order it is shown.
pub const STATEMENTS: [&str; 8] = [
    PROOF,
    NO_COMMISSION,
    "The store does not bridge, mint or burn USDC, and runs no buyer agent; payments are verified and settled by an external facilitator, the only settler.",
    OWN_PRODUCTS,
    NO_AGENT_CARD,
    NO_ENDORSEMENT,
    FREE_CATALOG,
    FUNNEL,
];

/// The doctrine in demo mode: the in-process sandbox settles, and no funds move.
const DEMO_STATEMENTS: [&str; 8] = [
    PROOF,
    NO_COMMISSION,
    "The store does not bridge, mint or burn USDC, and runs no buyer agent; in this demo mode payments are verified and settled by an in-process sandbox facilitator, the only settler, and no funds move.",
    OWN_PRODUCTS,
    NO_AGENT_CARD,
    NO_ENDORSEMENT,
    FREE_CATALOG,
    FUNNEL,
];

const PROOF: &str = "A Passport is proof of purchase only. It is not proof that a file is useful, and not proof that any third-party index lists this store.";
const NO_COMMISSION: &str =
    "The store pays no commission and runs no affiliate program, vendor menu or agent registry.";
const OWN_PRODUCTS: &str =
    "The store sells only its own products: its 402 challenges list no other merchants.";
const NO_AGENT_CARD: &str = "The store hosts no agent card: /.well-known/did.json answers 404.";
const NO_ENDORSEMENT: &str = "The store never states that a file was useful, that an agent should buy, or that a citing agent is trustworthy.";
const FREE_CATALOG: &str = "Catalog documents are free HTTP 200 resources, never paywalls; only GET /api/x402/{sku} answers 402.";

const FUNNEL: &str = "The funnel's retrieved, considered and selected stages count requests anyone can send for free (catalog documents served, 402 challenges served, requests carrying a PAYMENT-SIGNATURE whether or not the payment is valid), so they can be inflated; only purchased, used, returned and referred rest on settled payments.";

/// The doctrine for the store's mode (`demo`: payments settle in the in-process sandbox).
pub fn statements(demo: bool) -> [&'static str; 8] {
    if demo { DEMO_STATEMENTS } else { STATEMENTS }
}

/// The doctrine as one paragraph of prose.
pub fn prose(demo: bool) -> String {
    statements(demo).join(" ")
}
