-- The PostgreSQL schema: the same tables as the SQLite migrations, in PostgreSQL's types
-- (BIGINT for unix seconds, micros and counts; BOOLEAN for flags; identity columns for order).

-- The paywall layer's payment ledger is created by the layer itself
-- (PostgresSettlementStore::migrate: table x402_payment_ledger).

-- One row per purchase; a payment buys at most one order.
CREATE TABLE orders (
    seq           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    passport      TEXT NOT NULL UNIQUE,
    sku           TEXT NOT NULL,
    resource      TEXT NOT NULL,
    payer         TEXT,            -- as reported by the facilitator
    payer_norm    TEXT,            -- lowercased, for comparisons
    network       TEXT NOT NULL,
    tx            TEXT NOT NULL,
    amount_micros BIGINT NOT NULL CHECK (amount_micros >= 0),
    payment_key   TEXT NOT NULL UNIQUE,
    demo          BOOLEAN NOT NULL,
    issued        BIGINT NOT NULL -- unix seconds
);
CREATE INDEX orders_by_payer ON orders (payer_norm, demo, seq);

-- The secrets that unlock an order's files; only their SHA-256 is kept.
CREATE TABLE fulfillment_grants (
    secret_hash TEXT PRIMARY KEY NOT NULL,
    passport    TEXT NOT NULL REFERENCES orders (passport)
);
CREATE INDEX fulfillment_grants_by_passport ON fulfillment_grants (passport);

-- The Passport an order cited in X-REFERRER-PASSPORT, and whether it counted.
CREATE TABLE referrals (
    passport TEXT PRIMARY KEY NOT NULL REFERENCES orders (passport),
    cited    TEXT NOT NULL,
    counted  BOOLEAN NOT NULL,
    reason   TEXT NOT NULL
);
CREATE INDEX referrals_counted ON referrals (counted);

-- One row per file served to a key holder.
CREATE TABLE downloads (
    seq      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    passport TEXT NOT NULL REFERENCES orders (passport),
    file     TEXT NOT NULL,
    at       BIGINT NOT NULL
);
CREATE INDEX downloads_by_passport ON downloads (passport);

-- Funnel counters fed by traffic (retrieved, considered, selected) and the indexed gauge. Every
-- instance adds its increments; none overwrites another's.
CREATE TABLE counters (
    stage TEXT NOT NULL,
    mode  TEXT NOT NULL CHECK (mode IN ('live', 'demo')),
    value BIGINT NOT NULL CHECK (value >= 0),
    PRIMARY KEY (stage, mode)
);
