//! What the store says about itself, and what it never says. Served by the MCP `get_doctrine`
//! tool, `/llms.txt` and `/bazaar`.

/// The doctrine, one statement per entry, in the order it is shown.
pub const STATEMENTS: [&str; 7] = [
    "A Passport is proof of purchase only. It is not proof that a file is useful, and not proof that any third-party index lists this store.",
    "The store pays no commission and runs no affiliate program, vendor menu or agent registry.",
    "The store does not bridge, mint or burn USDC, and runs no buyer agent; payments are verified and settled by an external facilitator, the only settler.",
    "The store sells only its own products: its 402 challenges list no other merchants.",
    "The store hosts no agent card: /.well-known/did.json answers 404.",
    "The store never states that a file was useful, that an agent should buy, or that a citing agent is trustworthy.",
    "Catalog documents are free HTTP 200 resources, never paywalls; only GET /api/x402/{sku} answers 402.",
];

/// The doctrine as one paragraph of prose.
pub fn prose() -> String {
    STATEMENTS.join(" ")
}
